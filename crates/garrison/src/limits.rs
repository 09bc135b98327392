//! Process limits raised at start.
//!
//! A Garrison serving a thousand sessions holds a descriptor or more for
//! each (its fleet API connections, session logs, pipes to starting
//! shims), and `bench scale` holds the emulator's thousand gateway
//! connections besides: the common soft limit of 1,024 open files would
//! fail the thousandth session, not configure it. The hard limit is what
//! the administrator allows; the soft one is raised to it.

use nix::sys::resource::{Resource, getrlimit, setrlimit};

/// Raises the soft open-file limit to the hard one. A failure leaves the
/// limit as it was: nothing that worked before breaks.
pub(crate) fn raise_open_files() {
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE)
        && let Some(soft) = raised_soft_limit(soft, hard)
    {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, soft, hard);
    }
}

/// The soft limit to set, or `None` when it is at the hard one already.
fn raised_soft_limit(soft: u64, hard: u64) -> Option<u64> {
    (soft < hard).then_some(hard)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_rises_to_the_hard_one() {
        assert_eq!(raised_soft_limit(1_024, 524_288), Some(524_288));
        assert_eq!(raised_soft_limit(4_096, 4_096), None);
        assert_eq!(
            raised_soft_limit(1_024, nix::sys::resource::RLIM_INFINITY),
            Some(nix::sys::resource::RLIM_INFINITY)
        );
    }
}
