//! An outpost's platform against what its backend runs, checked before
//! anything is claimed: Devin's worker "refuses an OS mismatch with a clear
//! message", and a Linux `devin-remote` started for a `windows` session
//! would only fail once the session is taken.

use fleet::Platform;
use sandbox::Capabilities;

/// Where the platform that was refused was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PlatformSource {
    /// The outpost's `platform` setting.
    Setting,
    /// The outpost as the fleet API describes it (`spec.platform`).
    Outpost,
}

/// An outpost no configured backend can serve: a configuration error
/// (`serve` exits 78, EX_CONFIG).
#[derive(Debug, thiserror::Error)]
#[error(
    "outpost {outpost} is for {platform} sessions ({from}), but its backend {backend} runs {serves} \
     sandboxes only: a {serves} devin-remote cannot serve them. Serve this outpost from a \
     {platform} machine with Devin's own worker, or give Garrison a {serves} outpost"
)]
pub struct PlatformRefused {
    /// The outpost.
    pub outpost: String,
    /// Its platform.
    pub platform: String,
    /// The backend.
    pub backend: &'static str,
    /// The platforms the backend serves.
    pub serves: &'static str,
    from: &'static str,
}

/// Refuses an outpost whose platform the backend's sandboxes do not run.
pub(super) fn check(
    outpost: &str,
    platform: &Platform,
    source: PlatformSource,
    backend: &'static str,
    capabilities: &Capabilities,
) -> Result<(), PlatformRefused> {
    let serves = capabilities.os.as_str();
    let platform = platform.as_str();
    if platform == serves {
        return Ok(());
    }
    Err(PlatformRefused {
        outpost: outpost.to_owned(),
        platform: platform.to_owned(),
        backend,
        serves,
        from: match source {
            PlatformSource::Setting => "its platform setting",
            PlatformSource::Outpost => "its spec.platform in the fleet API",
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox::{Arch, Os};

    fn linux() -> Capabilities {
        Capabilities {
            os: Os::Linux,
            arch: Arch::X86_64,
            suspend_keeps_memory: false,
            enforces_network_policy: false,
            snapshots: true,
        }
    }

    #[test]
    fn only_the_backends_own_os_is_served() {
        assert!(
            check(
                "o",
                &Platform::Linux,
                PlatformSource::Setting,
                "host",
                &linux()
            )
            .is_ok()
        );
        for platform in [
            Platform::Windows,
            Platform::Macos,
            Platform::Unknown("plan9".into()),
        ] {
            let err =
                check("o", &platform, PlatformSource::Outpost, "modal", &linux()).unwrap_err();
            let text = err.to_string();
            assert!(
                text.contains(platform.as_str()) && text.contains("backend modal runs linux"),
                "{text}"
            );
        }
    }
}
