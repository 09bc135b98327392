//! The global `-q`/`--quiet` and `-v`/`--verbose` flags: what reaches
//! stderr. `-q`: errors only (no notes, progress or log lines below error
//! level). `-v`: debug lines from Garrison's own crates, `-vv` debug from
//! every crate, `-vvv` trace. Either flag wins over `RUST_LOG`; without
//! them, `RUST_LOG` when set, else each command's own default level.
//! Results on stdout are the same whatever the flags.

use std::sync::atomic::{AtomicI8, Ordering};

use tracing_subscriber::EnvFilter;

/// -1 quiet, 0 neither flag, 1-3 the `-v` count; set once by `main`.
static LEVEL: AtomicI8 = AtomicI8::new(0);

/// Garrison's own crates, as tracing names their targets: `-v` turns
/// these to debug and leaves the libraries at info.
const OWN_CRATES: &[&str] = &[
    "garrison",
    "orchestrator",
    "sandbox",
    "fleet",
    "common",
    "emulator",
    "tensorlake",
    "tensorlake_mock",
    "modal",
    "modal_mock",
];

/// Records the flags for every later log setup and note.
pub(crate) fn set(quiet: bool, verbose: u8) {
    let level = if quiet { -1 } else { verbose.min(3) as i8 };
    LEVEL.store(level, Ordering::Relaxed);
}

/// Whether `-q` was given.
pub(crate) fn quiet() -> bool {
    LEVEL.load(Ordering::Relaxed) < 0
}

/// The log filter for a command whose own default is `default`.
pub(crate) fn filter(default: &str) -> EnvFilter {
    match directives(LEVEL.load(Ordering::Relaxed)) {
        Some(directives) => EnvFilter::new(directives),
        None => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default)),
    }
}

/// The directives the flags ask for (`None`: neither flag was given).
fn directives(level: i8) -> Option<String> {
    match level {
        ..0 => Some("error".to_owned()),
        0 => None,
        1 => {
            let own: Vec<String> = OWN_CRATES.iter().map(|c| format!("{c}=debug")).collect();
            Some(format!("info,{}", own.join(",")))
        }
        2 => Some("debug".to_owned()),
        _ => Some("trace".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_level_names_its_directives() {
        assert_eq!(directives(-1).as_deref(), Some("error"));
        assert_eq!(directives(0), None);
        let one = directives(1).unwrap();
        assert!(
            one.starts_with("info,garrison=debug,orchestrator=debug"),
            "{one}"
        );
        assert_eq!(directives(2).as_deref(), Some("debug"));
        assert_eq!(directives(3).as_deref(), Some("trace"));
        // Every directive parses.
        for level in -1..=3 {
            if let Some(d) = directives(level) {
                EnvFilter::try_new(&d).unwrap_or_else(|e| panic!("{d}: {e}"));
            }
        }
    }
}
