//! The subcommands of `garrison`, one module each: its flags and its `run`.

pub(crate) mod bench;
pub(crate) mod completions;
pub(crate) mod connect;
pub(crate) mod demo;
pub(crate) mod deploy;
pub(crate) mod doctor;
pub(crate) mod emulate;
pub(crate) mod image;
pub(crate) mod logs;
pub(crate) mod man;
pub(crate) mod mock;
pub(crate) mod outposts;
pub(crate) mod serve;
pub(crate) mod sessions;
pub(crate) mod status;
pub(crate) mod terminate;

use clap::Subcommand;

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Watch one or more outposts and serve their sessions until stopped.
    Serve(Box<serve::ServeArgs>),
    /// Run a local emulator of Devin's control plane (fleet API, gateway,
    /// scripted sessions) for tests and demos.
    Emulate(emulate::EmulateArgs),
    /// Benchmarks that print figures against their targets (not tests).
    Bench(bench::BenchArgs),
    /// Connect this machine to Devin (browser or --manual) and save the token.
    Connect(connect::ConnectArgs),
    /// List, create and delete outposts.
    Outposts(outposts::OutpostsArgs),
    /// The running daemon's health, outposts and sessions by stage.
    Status(status::StatusArgs),
    /// The sessions this Garrison holds and held.
    Sessions(sessions::SessionsArgs),
    /// A session's output and Garrison's events for it (-f follows).
    Logs(logs::LogsArgs),
    /// Stop a session's sandbox, keep or drop its snapshot, release the claim.
    Terminate(terminate::TerminateArgs),
    /// Build, import, list and remove session images: the local backend's,
    /// on Modal (`build --backend modal`) and in Tensorlake's catalog
    /// (`--backend tensorlake`).
    Image(image::ImageArgs),
    /// A self-contained demo: scripted sessions against a local emulator of
    /// Devin, served in this process, with a summary at the end.
    Demo(demo::DemoArgs),
    /// Check settings, token, scopes, outpost, backend prerequisites, disk
    /// and clock; exit 1 if a required check fails.
    Doctor(doctor::DoctorArgs),
    /// Run Garrison itself in a cloud sandbox, idempotently (--status,
    /// --logs, --terminate).
    Deploy(deploy::DeployArgs),
    /// Serve a mock of a cloud backend's API on this machine, to try that
    /// backend and run its tests without an account.
    #[command(long_about = mock::LONG_ABOUT)]
    Mock(mock::MockArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish,
    /// powershell) to stdout.
    Completions(completions::CompletionsArgs),
    /// Write a man page for garrison and each of its commands into a
    /// directory.
    Man(man::ManArgs),
}

impl Command {
    /// Long-running services, which write to sockets and must outlive a
    /// reader of their stdout (see `output`).
    pub(crate) fn is_service(&self) -> bool {
        matches!(
            self,
            Command::Serve(_) | Command::Emulate(_) | Command::Demo(_) | Command::Mock(_)
        )
    }

    /// The log level of a command that does not set up logging itself
    /// (`None` for those that do, with their own default and format).
    pub(crate) fn default_log_level(&self) -> Option<&'static str> {
        match self {
            Command::Serve(_) | Command::Demo(_) | Command::Bench(_) | Command::Doctor(_) => None,
            // The emulator's own default: it logs each request it serves.
            Command::Emulate(_) => Some("info"),
            _ => Some("warn"),
        }
    }
}

pub(crate) async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Serve(args) => serve::run(args).await,
        Command::Emulate(args) => emulate::run(args).await,
        Command::Bench(args) => bench::run(args).await,
        Command::Connect(args) => connect::run(args).await,
        Command::Outposts(args) => outposts::run(args).await,
        Command::Status(args) => status::run(args).await,
        Command::Sessions(args) => sessions::run(args).await,
        Command::Logs(args) => logs::run(args).await,
        Command::Terminate(args) => terminate::run(args).await,
        Command::Image(args) => image::run(args).await,
        Command::Demo(args) => demo::run(args).await,
        Command::Doctor(args) => doctor::run(args).await,
        Command::Deploy(args) => deploy::run(args).await,
        Command::Mock(args) => mock::run(args).await,
        Command::Completions(args) => completions::run(args),
        Command::Man(args) => man::run(args),
    }
}
