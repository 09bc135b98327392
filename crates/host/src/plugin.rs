//! The host backend as the registry lists it. It has no settings of its
//! own: a directory and a process group per session, no isolation.

use std::path::Path;
use std::sync::Arc;

use common::settings::{SettingsError, SettingsSource};

use sandbox::Sandbox;
use sandbox::plugin::doctor::Check;
use sandbox::plugin::{BackendPlugin, ConfiguredBackend, Placement};

use crate::backend::{HostBackend, HostConfig};

/// Sessions as plain processes on this machine (trusted development boxes).
pub struct HostPlugin;

/// The one [`HostPlugin`].
pub static PLUGIN: HostPlugin = HostPlugin;

impl BackendPlugin for HostPlugin {
    fn name(&self) -> &'static str {
        "host"
    }

    fn summary(&self) -> &'static str {
        "no isolation: a directory and a process group per session"
    }

    fn configure(
        &self,
        _settings: &dyn SettingsSource,
    ) -> Result<Arc<dyn ConfiguredBackend>, SettingsError> {
        Ok(Arc::new(Host))
    }

    fn prerequisites(
        &self,
        _configured: Option<&dyn ConfiguredBackend>,
        _state_dir: &Path,
    ) -> Option<Vec<Check>> {
        Some(vec![Check::pass(
            "host backend",
            "nothing to install; it isolates nothing, so use it only on machines you \
             would give the agent anyway",
        )])
    }
}

#[derive(Debug)]
struct Host;

impl ConfiguredBackend for Host {
    fn build(&self, placement: &Placement) -> anyhow::Result<Arc<dyn Sandbox>> {
        Ok(Arc::new(HostBackend::new(HostConfig {
            root: placement.state_dir.join("host"),
            snapshot_dir: placement.snapshot_dir.join("host"),
            snapshot_store: placement.snapshot_store.clone(),
            shim_exe: placement.exe.clone(),
        })?))
    }
}
