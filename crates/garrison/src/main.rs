//! `garrison`: serves Devin Outposts sessions in isolated sandboxes.

mod bench;
mod cli;
mod connect;
mod demo;
mod deploy;
mod doctor;
mod image_cmd;
mod image_modal;
mod logging;
mod mock_cmd;
mod outposts_cmd;
mod serve_args;
mod signals;
mod tensorlake_access;

use clap::{Parser, Subcommand};
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
#[command(
    name = "garrison",
    version,
    about = "Orchestrator for Devin Outposts: claims queued Devin sessions and runs each in its own sandbox",
    long_about = None,
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Watch one or more outposts and serve their sessions until stopped.
    Serve(Box<serve_args::ServeArgs>),
    /// Run a local emulator of Devin's control plane (fleet API, gateway,
    /// scripted sessions) for tests and demos.
    Emulate(emulator::cli::EmulateArgs),
    /// Benchmarks that print figures against their targets (not tests).
    Bench(bench::BenchArgs),
    /// Connect this machine to Devin (browser or --manual) and save the token.
    Connect(connect::ConnectArgs),
    /// List, create and delete outposts.
    Outposts(outposts_cmd::OutpostsArgs),
    /// The running daemon's health, outposts and sessions by stage.
    Status(cli::status::StatusArgs),
    /// The sessions this Garrison holds and held.
    Sessions(cli::sessions::SessionsArgs),
    /// A session's output and Garrison's events for it (-f follows).
    Logs(cli::logs::LogsArgs),
    /// Stop a session's sandbox, keep or drop its snapshot, release the claim.
    Terminate(cli::terminate::TerminateArgs),
    /// Build, import, list and remove the local backend's images (`image build --backend modal` builds on Modal).
    Image(image_cmd::ImageArgs),
    /// A self-contained demo: scripted sessions against a local emulator of
    /// Devin, served in this process, with a summary at the end.
    Demo(demo::DemoArgs),
    /// Check settings, token, scopes, outpost, backend prerequisites, disk
    /// and clock; exit 1 if a required check fails.
    Doctor(doctor::DoctorArgs),
    /// Run Garrison itself in a cloud sandbox, idempotently (--status,
    /// --logs, --terminate).
    Deploy(deploy::DeployArgs),
    /// Mocks of cloud APIs for trying backends without an account.
    #[command(hide = true)]
    Mock(mock_cmd::MockArgs),
}

fn main() -> anyhow::Result<()> {
    // The host backend starts each session process through this binary: the
    // shim must not parse arguments, start a runtime or log anything.
    let args: Vec<String> = std::env::args().collect();
    if let Some(code) = sandbox::shim::dispatch(&args) {
        std::process::exit(code);
    }
    let cli = Cli::parse();
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        match cli.command {
            Command::Serve(args) => serve(args).await,
            Command::Emulate(args) => emulator::cli::run(args).await,
            Command::Bench(args) => bench::run(args).await,
            Command::Connect(args) => connect::run(args).await,
            Command::Outposts(args) => outposts_cmd::run(args).await,
            Command::Status(args) => cli::status::run(args).await,
            Command::Sessions(args) => cli::sessions::run(args).await,
            Command::Logs(args) => cli::logs::run(args).await,
            Command::Terminate(args) => cli::terminate::run(args).await,
            Command::Image(args) => image_cmd::run(args).await,
            Command::Demo(args) => demo::run(args).await,
            Command::Doctor(args) => doctor::run(args).await,
            Command::Deploy(args) => deploy::run(args).await,
            Command::Mock(args) => mock_cmd::run(args).await,
        }
    })
}

async fn serve(args: Box<serve_args::ServeArgs>) -> anyhow::Result<()> {
    logging::init(args.log_format);
    let mut config = serve_args::resolve(&args)?;
    config.admin_listen = Some(args.listen);
    let shim_exe = std::env::current_exe()?;
    let stop = CancellationToken::new();
    signals::on_stop_signal(stop.clone())?;
    orchestrator::serve::serve(config, shim_exe, stop).await
}
