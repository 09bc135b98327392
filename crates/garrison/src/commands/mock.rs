//! `garrison mock`: mocks of the cloud backends' APIs as processes, for
//! trying a backend (`garrison serve --backend tensorlake`) and running its
//! tests without a cloud account, including tests of commands that run in
//! another process. The mocks run their sandboxes' processes on this host.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use tokio_util::sync::CancellationToken;

/// `garrison mock --help`.
pub(crate) const LONG_ABOUT: &str = "\
Serves a mock of a cloud backend's API on this machine, to try that backend
(`garrison serve --backend tensorlake` or `modal`) and run its tests without an
account.

A mock is not the real service: it answers the API as the published material
describes it, but its \"sandboxes\" are directories on this host and their
processes run here, unsandboxed, as the user who started the mock. It listens
on loopback addresses only, and only until it is stopped (SIGTERM or Ctrl-C);
its sandboxes end with it.";

const MODAL_AFTER_HELP: &str = "\
Output:
  The first line is MODAL_SERVER_URL=http://127.0.0.1:PORT (the mock's
  address), the variable Modal's own client and `garrison serve --backend
  modal` read, so it can be exported as printed. The command router that
  runs sandbox processes is served at the same address, in plaintext (Modal's
  client accepts a plaintext router only when the server is on localhost).
  Nothing else is written to stdout.

Example:
  # In one terminal (the token is any pair of strings; clients must be given
  # the same):
  MODAL_TOKEN_ID=ak-try MODAL_TOKEN_SECRET=as-try \\
    garrison mock modal --root /tmp/modal-mock
  # In another, with the line it printed:
  export MODAL_TOKEN_ID=ak-try MODAL_TOKEN_SECRET=as-try \\
         MODAL_SERVER_URL=http://127.0.0.1:PORT
  garrison serve --backend modal";

const TENSORLAKE_AFTER_HELP: &str = "\
Output:
  Three lines: TENSORLAKE_API_URL=http://127.0.0.1:PORT (the mock's address),
  TENSORLAKE_SANDBOX_ROOT=<root>/sandboxes/{id} and
  TENSORLAKE_SANDBOX_API_URL=http://127.0.0.1:PORT (where lifecycle calls go;
  the official SDKs read the same variable). They are the variables
  `garrison serve --backend tensorlake` reads, so they can be exported as
  printed. Nothing else is written to stdout.

Example:
  # In one terminal (the key is any string; serve must be given the same):
  TENSORLAKE_API_KEY=tl_try garrison mock tensorlake --root /tmp/tl-mock
  # In another, with the three lines it printed:
  export TENSORLAKE_API_KEY=tl_try TENSORLAKE_API_URL=http://127.0.0.1:PORT \\
         TENSORLAKE_SANDBOX_ROOT=/tmp/tl-mock/sandboxes/{id} \\
         TENSORLAKE_SANDBOX_API_URL=http://127.0.0.1:PORT
  garrison serve --backend tensorlake";

#[derive(Args, Debug)]
pub(crate) struct MockArgs {
    #[command(subcommand)]
    service: Service,
}

#[derive(Subcommand, Debug)]
enum Service {
    /// Tensorlake's sandbox API (lifecycle, processes, files, PTY, snapshots).
    ///
    /// The key it accepts is read from TENSORLAKE_API_KEY (never a flag): use
    /// the same value for `garrison serve`. Prints the variables to use with
    /// it, then serves until stopped.
    #[command(after_help = TENSORLAKE_AFTER_HELP)]
    Tensorlake {
        /// A loopback address (others are refused).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
        /// Holds the sandboxes' directories and the snapshots.
        #[arg(long)]
        root: PathBuf,
        /// Suspend named sandboxes idle for their `timeout_secs`, as
        /// Tensorlake does.
        #[arg(long)]
        idle_suspend: bool,
    },
    /// Modal's gRPC API (apps, images, sandboxes, snapshots) and the task
    /// command router its client runs processes through.
    ///
    /// The token it accepts is read from MODAL_TOKEN_ID and
    /// MODAL_TOKEN_SECRET (never flags): give clients the same. Prints the
    /// variable to use with it, then serves until stopped.
    #[command(after_help = MODAL_AFTER_HELP)]
    Modal {
        /// A loopback address (others are refused).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
        /// Holds the sandboxes' directories and the snapshots.
        #[arg(long)]
        root: PathBuf,
    },
}

pub(crate) async fn run(args: MockArgs) -> anyhow::Result<()> {
    match args.service {
        Service::Tensorlake {
            listen,
            root,
            idle_suspend,
        } => tensorlake(listen, root, idle_suspend).await,
        Service::Modal { listen, root } => modal(listen, root).await,
    }
}

/// A mock runs whatever a credential holder asks for, on this host,
/// unsandboxed: it never listens beyond loopback.
fn require_loopback(listen: SocketAddr) -> anyhow::Result<()> {
    if !listen.ip().is_loopback() {
        anyhow::bail!("--listen {listen}: the mock listens on loopback addresses only");
    }
    Ok(())
}

/// A required, non-empty credential from the environment (never argv).
fn credential(name: &str, what: &str) -> anyhow::Result<String> {
    std::env::var(name)
        .ok()
        .filter(|v| !v.is_empty())
        .ok_or_else(|| anyhow::anyhow!("set {name} to the {what} the mock accepts"))
}

async fn modal(listen: SocketAddr, root: PathBuf) -> anyhow::Result<()> {
    require_loopback(listen)?;
    let mut config = modal_mock::MockConfig::new(root);
    config.token_id = credential("MODAL_TOKEN_ID", "token id")?;
    config.token_secret = credential("MODAL_TOKEN_SECRET", "token secret")?;
    let mock = modal_mock::MockModal::start_on(listen, config).await?;
    println!("MODAL_SERVER_URL={}", mock.url());
    wait_for_stop_signal().await?;
    // Dropping the mock kills the processes it ran.
    drop(mock);
    Ok(())
}

async fn wait_for_stop_signal() -> anyhow::Result<()> {
    let stop = CancellationToken::new();
    crate::signals::on_stop_signal(stop.clone())?;
    stop.cancelled().await;
    Ok(())
}

async fn tensorlake(listen: SocketAddr, root: PathBuf, idle_suspend: bool) -> anyhow::Result<()> {
    require_loopback(listen)?;
    let key = credential("TENSORLAKE_API_KEY", "key")?;
    let mut config = tensorlake_mock::MockConfig::new(key, root);
    config.idle_suspend = idle_suspend;
    let mock = tensorlake_mock::MockTensorlake::start_on(listen, config).await?;
    println!("TENSORLAKE_API_URL={}", mock.url());
    println!("TENSORLAKE_SANDBOX_ROOT={}", mock.sandbox_root_template());
    // The lifecycle calls go to the sandbox API host, which the SDKs derive
    // from the API URL (`api.` becomes `sandbox.`); a loopback address has
    // nothing to derive from, so it is named as the official SDK lets it be.
    println!("TENSORLAKE_SANDBOX_API_URL={}", mock.url());
    wait_for_stop_signal().await?;
    // Dropping the mock kills the processes it ran.
    drop(mock);
    Ok(())
}
