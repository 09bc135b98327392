//! Where `status`, `sessions` and `logs` read from: the daemon's admin
//! API, else, when the daemon is not reachable, the state store and the
//! session logs it left in its state directory (saying so in one dim line
//! on stderr). `terminate` has no fallback: only the daemon holding the
//! claim can stop a session.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Args;
use common::Secret;
use common::settings::SettingsError;
use orchestrator::Store;
use orchestrator::api::{LogChunk, SessionSummary};
use orchestrator::settings::{HostEnv, RawSettings};

use crate::admin_client::{Admin, AdminError, DEFAULT_ADMIN_URL};
use crate::commands::serve::with_environment_variable;
use crate::format::note;

/// Where to read from: the daemon's admin API, else the state directory.
#[derive(Args, Clone, Debug)]
#[command(mut_args = with_environment_variable)]
pub(crate) struct SourceArgs {
    /// The admin listener of a running `garrison serve`.
    #[arg(long, env = "GARRISON_ADMIN_URL", value_name = "URL", default_value = DEFAULT_ADMIN_URL)]
    pub admin: String,

    /// State directory to read when the daemon is not reachable [default:
    /// /var/lib/garrison as root, else ~/.local/share/garrison]
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
}

impl SourceArgs {
    pub(crate) fn admin_client(&self) -> anyhow::Result<Admin> {
        Admin::new(&self.admin, self.admin_token()?)
    }

    /// The daemon's admin token: `GARRISON_ADMIN_TOKEN`, else the state
    /// directory's token file when this user may read it (`None` when not:
    /// reading needs no token on loopback, and a refusal says what would).
    fn admin_token(&self) -> anyhow::Result<Option<Secret>> {
        use orchestrator::{ADMIN_TOKEN_ENV, ADMIN_TOKEN_FILE};
        if let Some(token) = std::env::var(ADMIN_TOKEN_ENV)
            .ok()
            .filter(|t| !t.is_empty())
        {
            return Ok(Some(Secret::new(token)));
        }
        let Ok(state_dir) = self.state_dir() else {
            return Ok(None);
        };
        match common::settings::read_secret_file(&state_dir.join(ADMIN_TOKEN_FILE)) {
            Ok(token) => Ok(Some(token)),
            Err(SettingsError::Read { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The state directory: the flag, else `GARRISON_HOME`, else the
    /// default configuration file's `state_dir`, else the default.
    pub(crate) fn state_dir(&self) -> anyhow::Result<PathBuf> {
        if let Some(dir) = &self.state_dir {
            return Ok(dir.clone());
        }
        let host = HostEnv::current();
        if let Some(dir) = RawSettings::from_env(&host).state_dir {
            return Ok(dir.value);
        }
        if let Ok(path) = host.config_file_path()
            && let Ok(Some(file)) = orchestrator::settings::load_file(&path, &crate::backends::ALL)
            && let Some(dir) = file.state_dir
        {
            return Ok(dir.value);
        }
        Ok(host.default_state_dir()?)
    }

    /// Opens the state directory's store without creating anything.
    pub(crate) fn local(&self) -> anyhow::Result<Local> {
        Local::open(&self.state_dir()?)
    }

    /// The state directory's store, read because the daemon at `admin`
    /// answered `why`; says so on stderr. The error names both failures.
    pub(crate) fn local_instead_of(
        &self,
        admin: &Admin,
        why: &AdminError,
    ) -> anyhow::Result<Local> {
        let local = self.local().map_err(|local_error| {
            anyhow::anyhow!(
                "the daemon at {} is {why}, and its state cannot be read: {local_error:#}",
                admin.base()
            )
        })?;
        fallback_note(admin, why, &local);
        Ok(local)
    }
}

/// The state directory of a (possibly stopped) daemon.
pub(crate) struct Local {
    pub state_dir: PathBuf,
    pub db_path: PathBuf,
    pub store: Store,
}

impl Local {
    pub(crate) fn open(state_dir: &Path) -> anyhow::Result<Self> {
        let db_path = orchestrator::db_path(state_dir);
        if !db_path.exists() {
            bail!(
                "no state store at {} (has `garrison serve` run with this state directory? pass --state-dir or set GARRISON_HOME)",
                db_path.display()
            );
        }
        let store = Store::open_existing(&db_path)?;
        Ok(Self {
            state_dir: state_dir.to_owned(),
            db_path,
            store,
        })
    }

    /// The session's log directory: named by the hashed id, never the id.
    pub(crate) fn session_dir(&self, session_id: &str) -> PathBuf {
        self.state_dir
            .join("sessions")
            .join(sandbox::hashed_id(session_id))
    }

    pub(crate) fn remote_log(&self, session_id: &str) -> PathBuf {
        self.session_dir(session_id).join(orchestrator::REMOTE_LOG)
    }

    /// A row as the admin API would give it (sizing is not recorded).
    pub(crate) fn summary(&self, rec: &orchestrator::SessionRecord) -> SessionSummary {
        let mut summary = SessionSummary::from_record(rec);
        summary.snapshot_bytes = self
            .store
            .snapshots(&rec.session_id)
            .ok()
            .and_then(|s| s.last().map(|s| s.snapshot.size_bytes));
        summary
    }

    pub(crate) fn sessions(&self) -> anyhow::Result<Vec<SessionSummary>> {
        Ok(self
            .store
            .sessions()?
            .iter()
            .map(|rec| self.summary(rec))
            .collect())
    }

    /// Reads `remote.log` from `offset`: the text and the next offset.
    pub(crate) fn log_from(&self, session_id: &str, offset: u64) -> anyhow::Result<LogChunk> {
        use std::io::{Read, Seek, SeekFrom};
        let path = self.remote_log(session_id);
        let mut file = match std::fs::File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(LogChunk {
                    text: String::new(),
                    next_offset: offset,
                });
            }
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        file.seek(SeekFrom::Start(offset))?;
        let mut bytes = Vec::new();
        file.take(4 << 20).read_to_end(&mut bytes)?;
        // Stop at a character boundary; the rest comes next time.
        let valid = match std::str::from_utf8(&bytes) {
            Ok(_) => bytes.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => bytes.len(),
        };
        bytes.truncate(valid);
        Ok(LogChunk {
            text: String::from_utf8_lossy(&bytes).into_owned(),
            next_offset: offset + valid as u64,
        })
    }

    pub(crate) fn log_len(&self, session_id: &str) -> u64 {
        std::fs::metadata(self.remote_log(session_id))
            .map(|m| m.len())
            .unwrap_or(0)
    }
}

/// The one line that says the daemon was not used.
fn fallback_note(admin: &Admin, why: &AdminError, local: &Local) {
    note(&format!(
        "daemon not reachable at {} ({why}); read from {}",
        admin.base(),
        local.db_path.display()
    ));
}

/// Whether to fall back to the state directory after this error.
pub(crate) fn should_fall_back(e: &AdminError) -> bool {
    match e {
        AdminError::Unreachable(_) => true,
        // Something else listens there, or a daemon without the JSON API.
        AdminError::Status(code, _) => matches!(code, 404 | 405 | 501 | 502 | 503),
    }
}
