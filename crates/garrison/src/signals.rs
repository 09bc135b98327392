//! Turning SIGTERM and Ctrl-C into a graceful stop.

use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

/// Cancels `stop` on the first SIGTERM or SIGINT; a second one exits at once
/// (sessions keep running: they are detached from this process).
pub(crate) fn on_stop_signal(stop: CancellationToken) -> std::io::Result<()> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        tracing::info!("stop requested: no new claims; send the signal again to exit at once");
        stop.cancel();
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        tracing::warn!("second stop signal: exiting now");
        std::process::exit(130);
    });
    Ok(())
}
