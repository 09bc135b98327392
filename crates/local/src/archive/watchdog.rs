//! A restore's time bound, for the blocking `tar` processes of the parallel
//! restore: each is registered here until it is reaped, and when the bound
//! passes, every one still registered is killed (and the dealing stops at
//! its next member), so the restore ends with an error instead of running
//! on.
//!
//! Children are reaped only through [`Watchdog::wait`], under the same lock
//! the killer holds, so a pid it kills is always still the restore's child
//! (a reaped pid could be another process's by then).

use std::collections::HashSet;
use std::io;
use std::process::{Child, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{RecvTimeoutError, Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

#[derive(Default)]
struct Shared {
    /// Pids of the restore's children not yet reaped.
    children: Mutex<HashSet<u32>>,
    expired: AtomicBool,
}

/// Kills the registered children once `bound` has passed.
pub(super) struct Watchdog {
    shared: Arc<Shared>,
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Watchdog {
    pub(super) fn start(bound: Duration) -> io::Result<Self> {
        let shared = Arc::new(Shared::default());
        // A bound of nothing has passed already.
        shared.expired.store(bound.is_zero(), Ordering::SeqCst);
        let (stop, stopped) = channel::<()>();
        let seen = shared.clone();
        let thread = std::thread::Builder::new()
            .name("restore-bound".into())
            .spawn(move || {
                if stopped.recv_timeout(bound) != Err(RecvTimeoutError::Timeout) {
                    return;
                }
                let children = seen.children.lock().unwrap_or_else(|p| p.into_inner());
                seen.expired.store(true, Ordering::SeqCst);
                for &pid in children.iter() {
                    // SAFETY: kill(2) on a pid that is our unreaped child
                    // (see the module's doc).
                    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
                }
            })?;
        Ok(Self {
            shared,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The bound has passed: the restore is being stopped.
    pub(super) fn expired(&self) -> bool {
        self.shared.expired.load(Ordering::SeqCst)
    }

    /// Registers a child just spawned; one spawned after the bound passed
    /// is killed at once.
    pub(super) fn watch(&self, child: &mut Child) {
        let mut children = self.lock();
        if self.expired() {
            let _ = child.kill();
        }
        children.insert(child.id());
    }

    /// Waits for `child` (registered with [`Self::watch`]) to end.
    pub(super) fn wait(&self, child: &mut Child) -> io::Result<ExitStatus> {
        let mut pause = Duration::from_millis(1);
        loop {
            {
                let mut children = self.lock();
                if let Some(status) = child.try_wait()? {
                    children.remove(&child.id());
                    return Ok(status);
                }
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<u32>> {
        self.shared
            .children
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_past_the_bound_is_killed_and_one_within_it_is_not() {
        let dog = Watchdog::start(Duration::from_millis(300)).unwrap();
        let mut quick = std::process::Command::new("true").spawn().unwrap();
        dog.watch(&mut quick);
        assert!(dog.wait(&mut quick).unwrap().success());
        let mut slow = std::process::Command::new("sleep")
            .arg("600")
            .spawn()
            .unwrap();
        dog.watch(&mut slow);
        let status = dog.wait(&mut slow).unwrap();
        assert!(!status.success());
        assert!(dog.expired());
    }
}
