//! The local backend as the registry lists it: its one setting, and the
//! check at start that there is an image to run sessions on.

use std::path::PathBuf;
use std::sync::Arc;

use common::settings::{SettingsError, SettingsSource};

use crate::Sandbox;
use crate::plugin::{BackendPlugin, ConfiguredBackend, Placement};

use super::{LocalBackend, LocalConfig};

/// Where the statically linked `garrison-shim` is, if not next to the
/// running binary (tests and development builds).
pub const STATIC_SHIM_ENV: &str = "GARRISON_STATIC_SHIM";

/// Containers on this machine: the embedded default.
pub struct LocalPlugin;

/// The one [`LocalPlugin`].
pub static PLUGIN: LocalPlugin = LocalPlugin;

impl BackendPlugin for LocalPlugin {
    fn name(&self) -> &'static str {
        "local"
    }

    fn summary(&self) -> &'static str {
        "a container per session on this machine"
    }

    fn setup_hint(&self) -> &'static str {
        "run scripts/setup as root, or `garrison doctor --backend local` to see what is missing"
    }

    fn configure(
        &self,
        settings: &dyn SettingsSource,
    ) -> Result<Arc<dyn ConfiguredBackend>, SettingsError> {
        Ok(Arc::new(Local {
            static_shim: settings
                .var(STATIC_SHIM_ENV)
                .map(|v| PathBuf::from(v.value)),
        }))
    }
}

#[derive(Debug)]
struct Local {
    /// `None`: `garrison-shim` next to the running binary.
    static_shim: Option<PathBuf>,
}

impl ConfiguredBackend for Local {
    fn build(&self, placement: &Placement) -> anyhow::Result<Arc<dyn Sandbox>> {
        let static_shim = self
            .static_shim
            .clone()
            .unwrap_or_else(|| placement.exe.with_file_name("garrison-shim"));
        let config =
            LocalConfig::for_state_dir(&placement.state_dir, &placement.snapshot_dir, static_shim)?;
        // Fail at start, not on the first session, when there is nothing
        // to run sessions on.
        config.images.resolve(&config.default_image).map_err(|e| {
            anyhow::anyhow!(
                "the local backend has no image {:?} in {}: {e:#}; build it with \
                 `garrison image build {}` (as root), or serve with --backend host",
                config.default_image,
                config.images.root().display(),
                config.default_image
            )
        })?;
        Ok(Arc::new(LocalBackend::new(config)?))
    }
}
