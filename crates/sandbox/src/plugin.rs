//! How a backend plugs into Garrison: one [`BackendPlugin`] per backend
//! crate, listed once in the `garrison` crate's registry.
//!
//! A plugin owns everything about its backend that is not the [`Sandbox`]
//! trait itself: the names, defaults and validation of its settings (read
//! through a [`SettingsSource`], so the errors name the variable or file
//! key), the secrets the session logs must never show, and what commands
//! other than `serve` need from it (a log follower, a credentials check,
//! Garrison deployed into it: [`deploy`], its session images: [`images`]).
//! The orchestrator sees only [`ConfiguredBackend`]s and the sandboxes they
//! build; it never names a backend.

use std::any::Any;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use common::Secret;
use common::settings::{Setting, SettingsError, SettingsSource};

use crate::contract::Sandbox;

pub mod deploy;
pub mod doctor;
pub mod images;

use deploy::{DeployTarget, Deployment};
use doctor::Check;
use images::ImageService;

/// One backend, as the registry lists it.
pub trait BackendPlugin: Sync {
    /// The name users give (`--backend`, `backend =`), e.g. `"local"`.
    fn name(&self) -> &'static str;

    /// What a session gets, in a few words for `--help`, e.g. "a container
    /// per session".
    fn summary(&self) -> &'static str;

    /// Its settings for `garrison serve --help`, one paragraph indented by
    /// two spaces (empty: it has none).
    fn settings_help(&self) -> &'static str {
        ""
    }

    /// The top-level keys of `garrison.toml` this backend reads (any other
    /// unknown key is an error): those of [`Self::settings`] that are in the
    /// file (the registry's tests check that the two agree).
    fn file_keys(&self) -> &'static [&'static str] {
        &[]
    }

    /// Its settings, declared as Garrison's own are: spellings, values,
    /// default and help, for `garrison.toml.example`, `serve --help` and
    /// the file's list of keys.
    fn settings(&self) -> &'static [Setting] {
        &[]
    }

    /// Keys of `garrison.toml` that must never hold a value, with what to
    /// do instead (e.g. an API key, which belongs in the environment or a
    /// 0600 file).
    fn refused_file_keys(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }

    /// What to set when its settings are missing or refused, for `doctor`.
    fn setup_hint(&self) -> &'static str {
        ""
    }

    /// Whether `garrison doctor` should check the provider's API with the
    /// resolved credentials (cloud backends).
    fn has_remote_api(&self) -> bool {
        false
    }

    /// Whether [`ConfiguredBackend::log_follower`] can follow a session's
    /// output from inside its sandbox (used by `garrison logs -f` when the
    /// session's log is not on this machine).
    fn follows_logs(&self) -> bool {
        false
    }

    /// `garrison deploy <name>`: Garrison itself in a sandbox of this
    /// backend, if it can host one.
    fn deploy_target(&self) -> Option<&'static dyn DeployTarget> {
        None
    }

    /// `garrison image ... --backend <name>`, if the backend builds
    /// session images of its own.
    fn images(&self) -> Option<&'static dyn ImageService> {
        None
    }

    /// How an error of this backend's API (from [`Sandbox::list`], say)
    /// failed, for `doctor`'s remedy; `None`: not one it recognises.
    fn api_failure(&self, _error: &anyhow::Error) -> Option<ApiFailure> {
        None
    }

    /// What this machine needs for the backend to run here (`garrison
    /// doctor`'s section for it, and what `garrison demo` checks before it
    /// picks the backend), for a backend that runs on this machine.
    /// `configured` is the backend as the settings configure it, when they
    /// resolve; `state_dir` is Garrison's. `None`: nothing is checked here
    /// (a cloud backend's API is checked through [`Sandbox::list`]).
    fn prerequisites(
        &self,
        _configured: Option<&dyn ConfiguredBackend>,
        _state_dir: &Path,
    ) -> Option<Vec<Check>> {
        None
    }

    /// Reads and validates the backend's settings. Called only when an
    /// outpost uses the backend, so a backend nobody uses needs nothing.
    /// [`SettingsError::Missing`] means "not configured at all".
    fn configure(
        &self,
        settings: &dyn SettingsSource,
    ) -> Result<Arc<dyn ConfiguredBackend>, SettingsError>;
}

/// How a call to a provider's API failed, as far as what to fix goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApiFailure {
    /// No answer: connection refused, DNS, timeout, a proxy's 5xx.
    Unreachable,
    /// The provider answered that the credentials are not accepted.
    Refused,
    /// Any other answer.
    Other,
}

impl fmt::Debug for dyn BackendPlugin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BackendPlugin({})", self.name())
    }
}

/// Where a backend keeps what it needs on this machine.
#[derive(Clone, Debug)]
pub struct Placement {
    /// Garrison's state directory (`$GARRISON_HOME`); a backend uses a
    /// subdirectory named after itself.
    pub state_dir: PathBuf,
    /// Where snapshots kept on this machine go (may be shared by several
    /// Garrisons).
    pub snapshot_dir: PathBuf,
    /// An object store for snapshots instead of `snapshot_dir` (which then
    /// only spools archives going up and coming down).
    pub snapshot_store: Option<crate::snapshot_store::ObjectStoreSettings>,
    /// The running `garrison` executable (its directory also holds
    /// `garrison-shim`).
    pub exe: PathBuf,
}

impl Placement {
    /// The places under a state directory and a snapshot directory, with
    /// `exe` as the shim; no object store.
    pub fn new(state_dir: &Path, snapshot_dir: &Path, exe: &Path) -> Self {
        Self {
            state_dir: state_dir.to_owned(),
            snapshot_dir: snapshot_dir.to_owned(),
            snapshot_store: None,
            exe: exe.to_owned(),
        }
    }

    /// The same, keeping snapshots in the object store `store`.
    #[must_use]
    pub fn with_snapshot_store(
        mut self,
        store: Option<crate::snapshot_store::ObjectStoreSettings>,
    ) -> Self {
        self.snapshot_store = store;
        self
    }
}

/// A backend whose settings were read and validated.
pub trait ConfiguredBackend: Send + Sync + fmt::Debug + Any {
    /// Values that must never appear in a session log (API keys, tokens).
    fn secrets(&self) -> Vec<Secret> {
        Vec::new()
    }

    /// The backend itself, keeping its files under `placement`. Fails when
    /// it could not serve a session (e.g. no image to run one on).
    fn build(&self, placement: &Placement) -> anyhow::Result<Arc<dyn Sandbox>>;

    /// A follower of a session's output from inside its sandbox, for
    /// backends where that output is not copied to this machine while the
    /// session runs somewhere else.
    fn log_follower(&self, _session_id: &str) -> anyhow::Result<Option<Box<dyn LogFollower>>> {
        Ok(None)
    }

    /// What `garrison deploy <name>` does with these settings, for a
    /// backend whose plug-in has a [`BackendPlugin::deploy_target`].
    fn deployment(&self) -> Option<&dyn Deployment> {
        None
    }
}

impl dyn ConfiguredBackend {
    /// The backend's own settings type, for the backend's crate (commands
    /// reach a backend through the capabilities above, never its types).
    pub fn downcast_ref<T: ConfiguredBackend>(&self) -> Option<&T> {
        (self as &dyn Any).downcast_ref()
    }
}

/// Where a [`LogFollower`] starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FollowStart {
    /// From the first line.
    Beginning,
    /// The last N lines so far.
    LastLines(u64),
}

/// Follows one session's output from inside its sandbox.
#[async_trait]
pub trait LogFollower: Send {
    /// Whether a sandbox for the session exists now.
    async fn exists(&self) -> anyhow::Result<bool>;

    /// Writes the output with `out` until the sandbox is gone; `note` says
    /// what the follower is waiting for.
    async fn follow(
        &mut self,
        start: FollowStart,
        out: &mut (dyn for<'b> FnMut(&'b [u8]) -> io::Result<()> + Send),
        note: &mut (dyn for<'b> FnMut(&'b str) + Send),
    ) -> anyhow::Result<()>;
}
