//! Ending the demo: Ctrl-C and SIGTERM, and removing every sandbox it made.
//!
//! The first signal asks the demo to end its sessions and wait a little for
//! Garrison to clean them up; a second stops that wait. Either way, once
//! Garrison has stopped, the demo destroys every sandbox still in its state
//! directory, and with them their containers, mounts and network links:
//! unlike a real deployment's sessions, which outlive a restart, nothing a
//! demo made can be picked up again (each run has a new emulator).

use std::path::Path;

use sandbox::plugin::{ConfiguredBackend, Placement};
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

/// Cancelled by the first stop signal, and by the second.
#[derive(Clone, Default)]
pub(super) struct Stops {
    /// End the demo: its sessions, then Garrison.
    pub interrupt: CancellationToken,
    /// Stop waiting for the sessions to wind down.
    pub hurry: CancellationToken,
}

/// Listens for SIGINT and SIGTERM from now on. A third signal exits at
/// once, saying what that leaves.
pub(super) fn on_signals() -> std::io::Result<Stops> {
    let stops = Stops::default();
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let tokens = stops.clone();
    tokio::spawn(async move {
        for count in 1.. {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            match count {
                1 => tokens.interrupt.cancel(),
                2 => {
                    println!("stopping now: removing the demo's sandboxes without waiting");
                    tokens.hurry.cancel();
                }
                _ => {
                    eprintln!(
                        "exiting at once: sandboxes may be left; the next `garrison demo` \
                         with this state directory removes them"
                    );
                    std::process::exit(1);
                }
            }
        }
    });
    Ok(stops)
}

/// Destroys every sandbox of `configured` in `state_dir` (their
/// containers, mounts and links), saying so when there were some. Returns
/// how many could not be removed.
pub(super) async fn remove_sandboxes(
    configured: &dyn ConfiguredBackend,
    state_dir: &Path,
    shim_exe: &Path,
    why: &str,
) -> usize {
    let placement = Placement::new(state_dir, &state_dir.join("snapshots"), shim_exe);
    let backend = match configured.build(&placement) {
        Ok(backend) => backend,
        Err(e) => {
            println!("could not look for the demo's sandboxes: {e:#}");
            return 1;
        }
    };
    let handles = match backend.list().await {
        Ok(handles) => handles,
        Err(e) => {
            println!("could not list the demo's sandboxes: {e}");
            return 1;
        }
    };
    if !handles.is_empty() {
        println!(
            "removing {} sandbox{} {why}",
            handles.len(),
            if handles.len() == 1 { "" } else { "es" }
        );
    }
    let mut failed = 0;
    for handle in handles {
        if let Err(e) = backend.destroy(&handle).await {
            println!("  could not remove {}: {e}", handle.name);
            failed += 1;
        }
    }
    failed
}
