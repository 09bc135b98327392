//! `garrison mock tensorlake` (hidden): the mock Tensorlake API as a
//! process, for trying `--backend tensorlake` and for tests of commands that
//! run in another process. Its processes run on this host.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use tokio_util::sync::CancellationToken;

#[derive(Args, Debug)]
pub struct MockArgs {
    #[command(subcommand)]
    service: Service,
}

#[derive(Subcommand, Debug)]
enum Service {
    /// Tensorlake's sandbox API. The key it accepts is read from
    /// TENSORLAKE_API_KEY (never a flag). Prints its URL and the
    /// TENSORLAKE_SANDBOX_ROOT to use with it, then serves until stopped.
    Tensorlake {
        /// A loopback address (others are refused).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
        /// Holds the sandboxes' directories and the snapshots.
        #[arg(long)]
        root: PathBuf,
        /// Suspend named sandboxes idle for their `timeout_secs`.
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
    let stop = CancellationToken::new();
    crate::signals::on_stop_signal(stop.clone())?;
    stop.cancelled().await;
    // Dropping the mock kills the processes it ran.
    drop(mock);
    Ok(())
}
