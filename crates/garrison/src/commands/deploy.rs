//! `garrison deploy tensorlake` and `garrison deploy modal`: Garrison itself
//! in a long-lived, named sandbox of the cloud it serves sessions on.
//!
//! `deploy modal` is in `modal_args` (options and help), `modal_plan`
//! (decisions), `modal_target` (deploying), `modal_watch` (status, logs,
//! terminate) and `modal_access` (Modal's API); the rest of this file and
//! the other modules are `deploy tensorlake`'s.
//!
//! Every run converges: the sandbox is created if there is none by that
//! name (resumed if suspended), and the serve process started if none runs.
//! So the same command, run every few minutes by cron or a systemd timer,
//! is the keep-alive for plans that suspend idle sandboxes. The credentials
//! are given to the process in its environment when it starts, through the
//! process API: never in an image, never in argv, never printed.

mod modal_access;
mod modal_args;
mod modal_plan;
mod modal_target;
mod modal_watch;
mod plan;
mod tensorlake_access;
mod tensorlake_target;

use clap::{Args, Subcommand};

pub(crate) use modal_args::ModalDeployArgs;
pub(crate) use tensorlake_target::run as run_tensorlake;

const AFTER_HELP: &str = "\
Examples:
  # First run creates the sandbox and starts `garrison serve` in it; later
  # runs resume it if Tensorlake suspended it, and restart serve if it stopped:
  export TENSORLAKE_API_KEY=tl_...     # and DEVIN_OUTPOSTS_TOKEN, or `garrison connect`
  garrison deploy tensorlake

  # Serve options after `--` are passed to the deployed `garrison serve`:
  garrison deploy tensorlake --cpus 2 --memory-mb 4096 -- --max-concurrent 8 --repos https://github.com/acme/app

  garrison deploy tensorlake --status      # sandbox state, serve process, uptime
  garrison deploy tensorlake --logs -f     # the deployed serve's output, followed
  garrison deploy tensorlake --terminate   # delete the sandbox

Credentials:
  The Devin token (DEVIN_OUTPOSTS_TOKEN, else the credentials file of `garrison
  connect`), TENSORLAKE_API_KEY (or TENSORLAKE_API_KEY_FILE) and GIT_TOKEN if set
  are read here and put in the serve process's environment when it starts,
  through Tensorlake's process API: never in the image, never on a command line,
  never printed. To rotate one: --terminate, then deploy again.

Settings:
  Read as `garrison serve` reads them (its flags after `--`, its environment
  variables, the TOML file); the resolved values and the serve variables set
  here go to the deployed serve, and the TOML file is copied in. The deployed
  serve keeps its state in the sandbox, under TENSORLAKE_SANDBOX_ROOT/deploy.

Keep-alive:
  Run this command every few minutes, more often than your plan's idle window,
  e.g. the cron line (deploy.env: TENSORLAKE_API_KEY=..., DEVIN_OUTPOSTS_TOKEN=...,
  mode 0600)
    */5 * * * * set -a && . $HOME/.config/garrison/deploy.env && set +a && /usr/local/bin/garrison deploy tensorlake >>$HOME/garrison-deploy.log 2>&1
  or the systemd units packaging/garrison-deploy.service and
  packaging/garrison-deploy.timer (see the README).

Exit status of --status: 0 when serve runs, 3 when it does not (or there is no
sandbox), 1 on an error.";

#[derive(Args, Debug)]
pub(crate) struct DeployArgs {
    #[command(subcommand)]
    target: Target,
}

#[derive(Subcommand, Debug)]
enum Target {
    /// Run `garrison serve --backend tensorlake` in a named Tensorlake
    /// sandbox, idempotently (safe to run from cron as the keep-alive).
    #[command(after_help = AFTER_HELP)]
    Tensorlake(TensorlakeDeployArgs),
    /// Run `garrison serve --backend modal` in a named Modal Sandbox,
    /// idempotently (safe to run from cron as the keep-alive).
    #[command(after_help = modal_args::AFTER_HELP)]
    Modal(ModalDeployArgs),
}

/// Options of `garrison deploy tensorlake`.
#[derive(Args, Debug, Clone)]
#[command(group = clap::ArgGroup::new("mode").args(["status", "logs", "terminate"]))]
pub(crate) struct TensorlakeDeployArgs {
    /// The sandbox's name (Tensorlake suspends and resumes only named ones)
    #[arg(long, env = "GARRISON_DEPLOY_NAME", default_value = plan::DEFAULT_NAME, value_name = "NAME")]
    pub name: String,

    /// Image of the orchestrator's sandbox [default: TENSORLAKE_IMAGE, else Tensorlake's]
    #[arg(long, env = "GARRISON_DEPLOY_IMAGE", value_name = "IMAGE")]
    pub image: Option<String>,

    /// vCPUs of the orchestrator's sandbox
    #[arg(long, default_value_t = 1.0, value_name = "N")]
    pub cpus: f64,

    /// Memory of the orchestrator's sandbox, MiB
    #[arg(long, default_value_t = 2048, value_name = "MIB")]
    pub memory_mb: u64,

    /// Disk of the orchestrator's sandbox, MiB
    #[arg(long, default_value_t = 10240, value_name = "MIB")]
    pub disk_mb: u64,

    /// Idle seconds before Tensorlake may suspend the orchestrator's sandbox
    /// (your plan may cap it; the keep-alive covers the rest)
    #[arg(long, default_value_t = 86_400, value_name = "SECS")]
    pub timeout_secs: u64,

    /// The Garrison binary copied into the sandbox (Linux x86-64)
    /// [default: this one]
    #[arg(long, value_name = "FILE")]
    pub binary: Option<std::path::PathBuf>,

    /// TOML settings file, copied into the sandbox for the deployed serve
    /// [default: $GARRISON_CONFIG/garrison.toml, if it exists]
    #[arg(long, env = "GARRISON_CONFIG_FILE", value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,

    /// Print the sandbox's state, the serve process's and its uptime; change nothing
    #[arg(long)]
    pub status: bool,

    /// Print the deployed serve's output; change nothing
    #[arg(long)]
    pub logs: bool,

    /// With --logs: keep printing; waits (without waking it) while the
    /// sandbox is suspended
    #[arg(short = 'f', long, requires = "logs")]
    pub follow: bool,

    /// Delete the sandbox (and the deployed serve with it)
    #[arg(long)]
    pub terminate: bool,

    /// `garrison serve` options for the deployed serve (after `--`)
    #[arg(last = true, value_name = "SERVE_ARGS")]
    pub serve_args: Vec<String>,
}

pub(crate) async fn run(args: DeployArgs) -> anyhow::Result<()> {
    match args.target {
        Target::Tensorlake(args) => run_tensorlake(args).await,
        Target::Modal(args) => modal_target::run(args).await,
    }
}
