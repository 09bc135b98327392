//! The Modal backend's settings as rows of Garrison's table of settings:
//! each non-secret one is a flag of `garrison serve`, its Modal SDK
//! variable and a top-level key of `garrison.toml` (flag beats variable
//! beats file); the token is a secret row, read from the environment or
//! Modal's own `~/.modal.toml` only.

use common::settings::{Kind, Setting};

use super::{
    CONFIG_PATH_ENV, ENVIRONMENT_ENV, IDLE_TIMEOUT_ENV, IMAGE_ENV, MAX_TIMEOUT_SECS, PROFILE_ENV,
    REGION_ENV, RUNTIME_ENV, SERVER_URL_ENV, TIMEOUT_ENV, TOKEN_ID_ENV, TOKEN_SECRET_ENV,
};

/// The file key (and setting name) of [`CONFIG_PATH_ENV`].
pub(crate) const CONFIG_PATH_KEY: &str = "modal_config_path";
/// The file key of [`PROFILE_ENV`].
pub(crate) const PROFILE_KEY: &str = "modal_profile";
/// The file key of [`SERVER_URL_ENV`] (and its alias `MODAL_API_URL`).
pub(crate) const SERVER_URL_KEY: &str = "modal_server_url";
/// The file key of [`ENVIRONMENT_ENV`].
pub(crate) const ENVIRONMENT_KEY: &str = "modal_environment";
/// The file key of [`IMAGE_ENV`].
pub(crate) const IMAGE_KEY: &str = "modal_image";
/// The file key of [`REGION_ENV`].
pub(crate) const REGION_KEY: &str = "modal_region";
/// The file key of [`TIMEOUT_ENV`].
pub(crate) const TIMEOUT_KEY: &str = "modal_sandbox_timeout_secs";
/// The file key of [`IDLE_TIMEOUT_ENV`].
pub(crate) const IDLE_TIMEOUT_KEY: &str = "modal_sandbox_idle_timeout_secs";
/// The file key of [`RUNTIME_ENV`].
pub(crate) const RUNTIME_KEY: &str = "modal_sandbox_runtime";
/// The name of [`TOKEN_ID_ENV`]'s row; never a key of the file.
pub(crate) const TOKEN_ID_KEY: &str = "modal_token_id";
/// The name of [`TOKEN_SECRET_ENV`]'s row; never a key of the file.
pub(crate) const TOKEN_SECRET_KEY: &str = "modal_token_secret";

/// The `Kind::Int` bound of the two timeouts.
const MAX_SECS: i64 = MAX_TIMEOUT_SECS as i64;

/// The Modal backend's settings.
pub(crate) const SETTINGS: &[Setting] = &[
    Setting::secret(
        TOKEN_ID_KEY,
        TOKEN_ID_ENV,
        "The Modal token's id (else the profile's token_id in Modal's own file)",
    ),
    Setting::secret(
        TOKEN_SECRET_KEY,
        TOKEN_SECRET_ENV,
        "The Modal token's secret (else the profile's token_secret in Modal's own file)",
    ),
    Setting::new(
        CONFIG_PATH_KEY,
        "--modal-config-path",
        CONFIG_PATH_ENV,
        Kind::Path,
        "Modal's own TOML file (mode 0600), read for the token, server_url and environment",
    )
    .described_default("~/.modal.toml")
    .example("\"/etc/garrison/modal.toml\""),
    Setting::new(
        PROFILE_KEY,
        "--modal-profile",
        PROFILE_ENV,
        Kind::Text,
        "The profile of Modal's own file to use",
    )
    .described_default("the active one, or the only one")
    .example("\"garrison\""),
    Setting::new(
        SERVER_URL_KEY,
        "--modal-server-url",
        SERVER_URL_ENV,
        Kind::Text,
        "Modal's API (the variable MODAL_API_URL is an older alias)",
    )
    .described_default("the profile's server_url, else https://api.modal.com")
    .example("\"https://api.modal.com\""),
    Setting::new(
        ENVIRONMENT_KEY,
        "--modal-environment",
        ENVIRONMENT_ENV,
        Kind::Text,
        "The Modal environment apps and sandboxes live in",
    )
    .described_default("the profile's environment, else the account's default")
    .example("\"main\""),
    Setting::new(
        IMAGE_KEY,
        "--modal-image",
        IMAGE_ENV,
        Kind::Text,
        "An image id (im-...) or a name built with `garrison image build --backend modal`",
    )
    .described_default("the outpost's image, else default")
    .example("\"default\""),
    Setting::new(
        REGION_KEY,
        "--modal-region",
        REGION_ENV,
        Kind::Text,
        "Comma-separated regions sandboxes may run in",
    )
    .described_default("Modal's choice")
    .example("\"us-east\""),
    Setting::new(
        TIMEOUT_KEY,
        "--modal-sandbox-timeout-secs",
        TIMEOUT_ENV,
        Kind::Int {
            min: 1,
            max: MAX_SECS,
        },
        "A sandbox's maximum lifetime in seconds",
    )
    .default("86400"),
    Setting::new(
        IDLE_TIMEOUT_KEY,
        "--modal-sandbox-idle-timeout-secs",
        IDLE_TIMEOUT_ENV,
        Kind::Int {
            min: 1,
            max: MAX_SECS,
        },
        "Seconds a sandbox may be idle before Modal ends it",
    )
    .described_default("none: only the lifetime")
    .example("3600"),
    Setting::new(
        RUNTIME_KEY,
        "--modal-sandbox-runtime",
        RUNTIME_ENV,
        Kind::Choice(&["gvisor", "vm"]),
        "The isolation sandboxes run under",
    )
    .described_default("Modal's (gvisor)")
    .example("\"gvisor\""),
];

/// What to do instead of putting the token in `garrison.toml`.
pub(crate) const REFUSED_FILE_KEYS: &[(&str, &str)] = &[
    (
        TOKEN_ID_KEY,
        "the Modal token is read from MODAL_TOKEN_ID and MODAL_TOKEN_SECRET in the environment, \
         or from Modal's own file (modal_config_path, mode 0600), never from this file",
    ),
    (
        TOKEN_SECRET_KEY,
        "the Modal token is read from MODAL_TOKEN_ID and MODAL_TOKEN_SECRET in the environment, \
         or from Modal's own file (modal_config_path, mode 0600), never from this file",
    ),
];

/// The file keys: those of [`SETTINGS`] in the file.
pub(crate) const FILE_KEYS: &[&str] = &[
    CONFIG_PATH_KEY,
    PROFILE_KEY,
    SERVER_URL_KEY,
    ENVIRONMENT_KEY,
    IMAGE_KEY,
    REGION_KEY,
    TIMEOUT_KEY,
    IDLE_TIMEOUT_KEY,
    RUNTIME_KEY,
];
