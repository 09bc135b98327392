//! Clock steps on one host without touching the machine's clock: each
//! Garrison runs with libfaketime preloaded, reading its wall-clock offset
//! from a file of its own that the injector rewrites. Only the realtime
//! clock is faked, as a real step (`date -s`, an NTP step) moves only
//! CLOCK_REALTIME: CLOCK_MONOTONIC, which tokio's timers and `Instant` read,
//! goes on as before. Faking it too would step tokio's clock backwards,
//! which no real host does. (With it unfaked, libfaketime 0.9.10 fails an
//! absolute `clock_nanosleep` on CLOCK_MONOTONIC with EINVAL; Garrison
//! makes none: std's `thread::sleep` sleeps relative, tokio waits in
//! `epoll_wait`.)

use std::path::{Path, PathBuf};

use anyhow::Context;

/// Where Debian's `libfaketime` package puts the library, by multiarch
/// triple, then where a source build puts it.
const DIRS: [&str; 2] = ["/usr/lib", "/usr/local/lib"];

/// The thread-safe build: Garrison reads the clock from many threads.
const LIBRARY: &str = "libfaketimeMT.so.1";

/// libfaketime, if installed (`scripts/setup` installs Debian's).
pub(crate) fn locate() -> Option<PathBuf> {
    let triple = format!("{}-linux-gnu", std::env::consts::ARCH);
    DIRS.iter()
        .flat_map(|dir| {
            [
                Path::new(dir).join(&triple).join("faketime").join(LIBRARY),
                Path::new(dir).join("faketime").join(LIBRARY),
            ]
        })
        .find(|p| p.is_file())
}

/// One host's clock: the offset file its Garrison's libfaketime reads.
pub(crate) struct FakeClock {
    file: PathBuf,
}

/// libfaketime's relative offset, in whole seconds ("+0", "-45").
pub(crate) fn spec(step_secs: i64) -> String {
    format!("{step_secs:+}\n")
}

impl FakeClock {
    /// A clock in `dir`, true for now.
    pub(crate) fn new(dir: &Path) -> anyhow::Result<FakeClock> {
        let clock = FakeClock {
            file: dir.join("faketime.rc"),
        };
        clock.step(0)?;
        Ok(clock)
    }

    /// The environment that makes a process read this clock.
    pub(crate) fn env(&self, library: &Path) -> Vec<(String, String)> {
        [
            ("LD_PRELOAD", library.display().to_string()),
            ("FAKETIME_TIMESTAMP_FILE", self.file.display().to_string()),
            // The file is read again at most a second after it changes
            // (reading it on every call would cost a file read per
            // timestamp).
            ("FAKETIME_CACHE_DURATION", "1".into()),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1".into()),
            // File times stay what the disk holds.
            ("NO_FAKE_STAT", "1".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    /// Sets the host's clock `step_secs` from the true time (0: true).
    /// The file is replaced whole, so it is never read half written.
    pub(crate) fn step(&self, step_secs: i64) -> anyhow::Result<()> {
        let next = self.file.with_extension("next");
        std::fs::write(&next, spec(step_secs))
            .with_context(|| format!("writing {}", next.display()))?;
        std::fs::rename(&next, &self.file)
            .with_context(|| format!("replacing {}", self.file.display()))
    }
}

/// Removes the semaphore and shared memory libfaketime made for process
/// `pid` (it names them by pid and leaves them behind on SIGKILL, and in
/// this version even on a clean exit). Its children attach to the same
/// ones, so one process's are all there are.
pub(crate) fn forget(pid: u32) {
    for name in [
        format!("faketime_shm_{pid}"),
        format!("sem.faketime_sem_{pid}"),
    ] {
        let _ = std::fs::remove_file(Path::new("/dev/shm").join(name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_signed_seconds_and_a_step_replaces_the_file() {
        assert_eq!(spec(0), "+0\n");
        assert_eq!(spec(45), "+45\n");
        assert_eq!(spec(-90), "-90\n");
        let dir = tempfile::tempdir().unwrap();
        let clock = FakeClock::new(dir.path()).unwrap();
        let read = || std::fs::read_to_string(dir.path().join("faketime.rc")).unwrap();
        assert_eq!(read(), "+0\n");
        clock.step(-30).unwrap();
        assert_eq!(read(), "-30\n");
        clock.step(0).unwrap();
        assert_eq!(read(), "+0\n");
        let env = clock.env(Path::new("/lib/libfaketimeMT.so.1"));
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("FAKETIME_DONT_FAKE_MONOTONIC"), Some("1"));
        assert_eq!(get("LD_PRELOAD"), Some("/lib/libfaketimeMT.so.1"));
    }
}
