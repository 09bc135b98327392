//! Whether suspending a local sandbox can keep its processes: not on
//! either runtime, and this says why. The conformance check "processes
//! survive suspend and resume" is skipped with [`unavailable_reason`], and
//! `garrison doctor` shows [`doctor_check`].
//!
//! - runc would need CRIU to checkpoint a container, and Debian's CRIU
//!   (3.17) fails on current kernels ("vdso: Unexpected rt vDSO area
//!   bounds").
//! - runsc can checkpoint a sandbox on gVisor's own network stack or on
//!   none, but refuses one on host networking ([`HOSTINET_REFUSAL`]), and
//!   Garrison runs every runsc sandbox on host networking: that is what puts
//!   the sandbox's sockets under its network namespace's nftables rules and
//!   resolver (see `Runtime::global_flags`). gVisor's own stack would bypass
//!   both, and Debian's runsc (20221219) refuses it on kernels since 6.x
//!   anyway. A suspend therefore keeps the filesystem (the snapshot) and the
//!   session's processes start afresh.

use sandbox::plugin::doctor::Check;

use crate::Runtime;

/// What runsc answers to `runsc checkpoint` of a sandbox on host
/// networking (gVisor issue 6243).
pub const HOSTINET_REFUSAL: &str = "checkpoint not supported when using hostinet";

/// Why a suspend of a sandbox on `runtime` keeps its files but not its
/// processes.
pub fn unavailable_reason(runtime: Runtime) -> String {
    match runtime {
        Runtime::Runc => "local with runc: checkpointing a runc container needs CRIU, \
                          which fails on this kernel (\"vdso: Unexpected rt vDSO area bounds\" \
                          with Debian's CRIU 3.17); a suspend keeps the filesystem only"
            .to_owned(),
        Runtime::Runsc => format!(
            "local with runsc: gVisor refuses to checkpoint a sandbox on host networking \
             (\"{HOSTINET_REFUSAL}\"), which Garrison's per-sandbox firewall and resolver \
             need; a suspend keeps the filesystem only"
        ),
    }
}

/// The doctor's line: memory suspend is unavailable, and why, with the
/// runtime's version when it is known.
pub(crate) fn doctor_check(runtime: Runtime, version: Option<&str>) -> Check {
    let version = version.map_or_else(String::new, |v| format!(" ({v})"));
    Check::info(
        "memory suspend",
        format!(
            "no{version}: {}; the session's processes start afresh on resume",
            unavailable_reason(runtime)
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_runtime_says_why_processes_do_not_survive_a_suspend() {
        assert!(unavailable_reason(Runtime::Runc).contains("CRIU"));
        assert!(unavailable_reason(Runtime::Runsc).contains(HOSTINET_REFUSAL));
        let check = doctor_check(Runtime::Runsc, Some("runsc version 0.0~20221219.0"));
        assert_eq!(check.name, "memory suspend");
        let line = check.detail;
        assert!(line.contains("20221219"), "{line}");
        assert!(line.contains("hostinet"), "{line}");
    }
}
