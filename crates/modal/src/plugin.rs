//! The Modal backend's plug-in: what the registry lists, how its
//! settings are read, and the capabilities it brings to the CLI (a deploy
//! target, an image service, reading its API's errors for `doctor`).

use std::sync::Arc;

use common::settings::{Setting, SettingsError, SettingsSource};
use sandbox::plugin::deploy::DeployTarget;
use sandbox::plugin::images::ImageService;
use sandbox::plugin::{ApiFailure, BackendPlugin, ConfiguredBackend};

use crate::settings::{FILE_KEYS, REFUSED_FILE_KEYS, SETTINGS, resolve};

/// The Modal backend as the registry lists it.
pub struct ModalPlugin;

/// The one [`ModalPlugin`].
pub static PLUGIN: ModalPlugin = ModalPlugin;

impl BackendPlugin for ModalPlugin {
    fn name(&self) -> &'static str {
        "modal"
    }

    fn summary(&self) -> &'static str {
        "a Modal Sandbox per session"
    }

    fn settings_help(&self) -> &'static str {
        "  MODAL_TOKEN_ID and MODAL_TOKEN_SECRET (never flags; else the profile of
  ~/.modal.toml chosen by MODAL_PROFILE, or MODAL_CONFIG_PATH), MODAL_SERVER_URL
  (alias MODAL_API_URL; else server_url of the profile) [default:
  https://api.modal.com], MODAL_ENVIRONMENT (else the profile's), MODAL_IMAGE,
  MODAL_REGION, MODAL_SANDBOX_TIMEOUT_SECS (a sandbox's lifetime)
  [default: 86400], MODAL_SANDBOX_IDLE_TIMEOUT_SECS, MODAL_SANDBOX_RUNTIME
  (gvisor or vm).
  Each but the token is also a flag (--modal-image, ...) and a file key
  (modal_image, ...)."
    }

    fn file_keys(&self) -> &'static [&'static str] {
        FILE_KEYS
    }

    fn settings(&self) -> &'static [Setting] {
        SETTINGS
    }

    fn refused_file_keys(&self) -> &'static [(&'static str, &'static str)] {
        REFUSED_FILE_KEYS
    }

    fn setup_hint(&self) -> &'static str {
        "set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET (or run `modal token new`, which writes \
         ~/.modal.toml), and MODAL_SERVER_URL only for a non-default endpoint"
    }

    fn has_remote_api(&self) -> bool {
        true
    }

    fn configure(
        &self,
        settings: &dyn SettingsSource,
    ) -> Result<Arc<dyn ConfiguredBackend>, SettingsError> {
        Ok(Arc::new(resolve(settings)?))
    }

    fn deploy_target(&self) -> Option<&'static dyn DeployTarget> {
        Some(&crate::deploy::TARGET)
    }

    fn images(&self) -> Option<&'static dyn ImageService> {
        Some(&crate::image_service::IMAGES)
    }

    fn api_failure(&self, error: &anyhow::Error) -> Option<ApiFailure> {
        crate::doctor::api_failure(error)
    }
}
