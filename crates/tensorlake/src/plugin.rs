//! The Tensorlake backend's plug-in: what the registry lists, how its
//! settings are read, and the capabilities it brings to the CLI (a deploy
//! target, an image service, reading its API's errors for `doctor`).

use std::sync::Arc;

use common::settings::{Setting, SettingsError, SettingsSource};
use sandbox::plugin::deploy::DeployTarget;
use sandbox::plugin::images::ImageService;
use sandbox::plugin::{ApiFailure, BackendPlugin, ConfiguredBackend};

use crate::settings::{
    API_KEY_FILE_KEY, API_URL_KEY, IMAGE_KEY, SANDBOX_API_URL_KEY, SANDBOX_ROOT_KEY, SETTINGS,
    TIMEOUT_SECS_KEY, resolve,
};

/// The Tensorlake backend as the registry lists it.
pub struct TensorlakePlugin;

/// The one [`TensorlakePlugin`].
pub static PLUGIN: TensorlakePlugin = TensorlakePlugin;

impl BackendPlugin for TensorlakePlugin {
    fn name(&self) -> &'static str {
        "tensorlake"
    }

    fn summary(&self) -> &'static str {
        "a Tensorlake microVM per session"
    }

    fn settings_help(&self) -> &'static str {
        "  TENSORLAKE_API_KEY (never a flag, never the file; or TENSORLAKE_API_KEY_FILE,
  a file of mode 0600), TENSORLAKE_API_URL [default: https://api.tensorlake.ai],
  TENSORLAKE_SANDBOX_API_URL (where lifecycle calls go, as the official SDK reads
  it) [default: the API URL's host with api. made sandbox.], TENSORLAKE_IMAGE, SANDBOX_TIMEOUT_SECS (idle seconds before Tensorlake
  suspends a sandbox) [default: 1800], TENSORLAKE_SANDBOX_ROOT [default: /garrison].
  Environment or file only (snake_case keys, e.g. tensorlake_image)."
    }

    fn file_keys(&self) -> &'static [&'static str] {
        &[
            API_KEY_FILE_KEY,
            API_URL_KEY,
            SANDBOX_API_URL_KEY,
            IMAGE_KEY,
            TIMEOUT_SECS_KEY,
            SANDBOX_ROOT_KEY,
        ]
    }

    fn settings(&self) -> &'static [Setting] {
        SETTINGS
    }

    fn refused_file_keys(&self) -> &'static [(&'static str, &'static str)] {
        &[(
            "tensorlake_api_key",
            "the Tensorlake API key is read from TENSORLAKE_API_KEY or the 0600 file named \
             by tensorlake_api_key_file, never from this file",
        )]
    }

    fn setup_hint(&self) -> &'static str {
        "set TENSORLAKE_API_KEY (or TENSORLAKE_API_KEY_FILE, mode 0600) to a key from \
         cloud.tensorlake.ai, and TENSORLAKE_API_URL only for a non-default endpoint"
    }

    fn has_remote_api(&self) -> bool {
        true
    }

    fn follows_logs(&self) -> bool {
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
