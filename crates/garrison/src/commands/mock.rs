//! `garrison mock`: mocks of the cloud backends' APIs as processes, for
//! trying a backend (`garrison serve --backend tensorlake`) and running its
//! tests without a cloud account, including tests of commands that run in
//! another process. The mocks run their sandboxes' processes on this host.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use tokio_util::sync::CancellationToken;

/// `garrison mock --help`.
pub const LONG_ABOUT: &str = "\
Serves a mock of a cloud backend's API on this machine, to try that backend
(`garrison serve --backend tensorlake`) and run its tests without an account.

A mock is not the real service: it answers the API as the published material
describes it, but its \"sandboxes\" are directories on this host and their
processes run here, unsandboxed, as the user who started the mock. It listens
on loopback addresses only, and only until it is stopped (SIGTERM or Ctrl-C);
its sandboxes end with it.";

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
pub struct MockArgs {
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
}

pub async fn run(args: MockArgs) -> anyhow::Result<()> {
    let Service::Tensorlake {
        listen,
        root,
        idle_suspend,
    } = args.service;
    // It runs whatever a key holder asks for, on this host, unsandboxed.
    if !listen.ip().is_loopback() {
        anyhow::bail!("--listen {listen}: the mock listens on loopback addresses only");
    }
    let key = std::env::var("TENSORLAKE_API_KEY")
        .ok()
        .filter(|k| !k.is_empty())
        .ok_or_else(|| anyhow::anyhow!("set TENSORLAKE_API_KEY to the key the mock accepts"))?;
    let mut config = tensorlake_mock::MockConfig::new(key, root);
    config.idle_suspend = idle_suspend;
    let mock = tensorlake_mock::MockTensorlake::start_on(listen, config).await?;
    println!("TENSORLAKE_API_URL={}", mock.url());
    println!("TENSORLAKE_SANDBOX_ROOT={}", mock.sandbox_root_template());
    // The lifecycle calls go to the sandbox API host, which the SDKs derive
    // from the API URL (`api.` becomes `sandbox.`); a loopback address has
    // nothing to derive from, so it is named as the official SDK lets it be.
    println!("TENSORLAKE_SANDBOX_API_URL={}", mock.url());
    let stop = CancellationToken::new();
    crate::signals::on_stop_signal(stop.clone())?;
    stop.cancelled().await;
    // Dropping the mock kills the processes it ran.
    drop(mock);
    Ok(())
}
