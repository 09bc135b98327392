//! The emulator's knobs ([`EmulatorConfig`]), the misbehaviour it can be
//! told to show ([`Faults`]), and where the remote simulator it serves is
//! found by default.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Every knob of the emulator. `Default` gives the protocol's real values
/// (5-minute claims and streams) on a random loopback port; tests shorten
/// them to milliseconds.
#[derive(Clone, Debug)]
pub struct EmulatorConfig {
    /// Where to listen; port 0 picks a free one.
    pub listen: SocketAddr,
    /// Lifetime of a claim.
    pub claim_ttl: Duration,
    /// Longest a watch stream stays open.
    pub max_stream: Duration,
    /// Interval of `: keepalive` comments on an idle watch.
    pub keepalive: Duration,
    /// How long a released suspended/terminated row lingers as `pending`
    /// before it is removed with a DELETED event.
    pub linger: Duration,
    /// Lag between the remote's exit (sleep/end) and `session_status`
    /// changing.
    pub status_lag: Duration,
    /// Lifetime of a connect token.
    pub connect_token_ttl: Duration,
    /// The partner integration's callback allowlist: the connect page
    /// relays codes only to these exact URLs (Devin's partners page,
    /// "Callback allowlist"). Holds Garrison's default callback
    /// ([`fleet::pkce::DEFAULT_CALLBACK_URL`]) by default, so `garrison
    /// connect` works against the emulator out of the box.
    pub connect_callbacks: Vec<String>,
    /// Spelling of `claim_deadline` (all three are seen in the wild).
    pub deadline_format: fleet::TimestampFormat,
    /// The simulator binary served by the static distribution; `None` tries
    /// [`locate_remote_sim`].
    pub remote_binary: Option<PathBuf>,
    /// The faults in force from the start.
    pub faults: Faults,
}

impl Default for EmulatorConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            claim_ttl: Duration::from_secs(300),
            max_stream: Duration::from_secs(300),
            keepalive: Duration::from_secs(15),
            linger: Duration::from_secs(30),
            status_lag: Duration::from_secs(2),
            connect_token_ttl: Duration::from_secs(24 * 3600),
            connect_callbacks: vec![fleet::pkce::DEFAULT_CALLBACK_URL.to_owned()],
            deadline_format: fleet::TimestampFormat::Seconds,
            remote_binary: None,
            faults: Faults::default(),
        }
    }
}

/// Misbehaviour seen in the wild, injected on demand.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Faults {
    /// Fraction of fleet API requests (under `/opbeta`) answered 500 or 503
    /// (alternately) before any state change.
    pub error_rate: f64,
    /// Fraction of fleet API requests carried out but answered 502, as
    /// when the answer is lost on its way back: the state changed (a claim
    /// was granted, a release done) and the client cannot tell.
    pub lost_answer_rate: f64,
    /// Added to every fleet API request.
    pub latency_ms: u64,
    /// Close each watch stream after this many seconds.
    pub cut_watch_every_secs: Option<u64>,
    /// Watch streams stay open and send keepalives but no events.
    pub withhold_events: bool,
    /// Fraction of reads (list/get/watch object) of a running session that
    /// show `session_status: suspended`.
    pub transient_suspended_rate: f64,
    /// Fraction of watch events sent twice in a row (delivery is
    /// at-least-once; clients must upsert).
    pub duplicate_event_rate: f64,
    /// Render a linux `spec.platform` as null ("the default") on outposts
    /// and queue entries, as the service does for outposts created without
    /// one.
    pub null_platform: bool,
    /// Fraction of claim answers (claims and renewals) sent without
    /// `status.claim_deadline`; the claim itself still has one.
    pub claim_deadline_missing_rate: f64,
    /// `claim_deadline` and `updated_at` as whole Unix seconds (truncated),
    /// as the reference server sends them, instead of fractional ones.
    pub whole_second_timestamps: bool,
    /// A release changes the row without a watch event, as Cognition's
    /// model of the server does: watchers see it only with a later change,
    /// so an acceptor's view still shows a claim it has given back.
    pub silent_release: bool,
}

/// Finds the `devin-remote-sim` binary: `$GARRISON_REMOTE_SIM`, then next to
/// the current executable, then its parent directory (tests run from
/// `target/debug/deps`), then the static release build
/// `target/x86_64-unknown-linux-gnu/release/` relative to those.
pub fn locate_remote_sim() -> Option<PathBuf> {
    const NAME: &str = "devin-remote-sim";
    if let Some(p) = std::env::var_os("GARRISON_REMOTE_SIM") {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Some(p);
        }
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    let mut dirs = vec![dir.to_path_buf()];
    if let Some(parent) = dir.parent() {
        dirs.push(parent.to_path_buf());
    }
    let mut candidates: Vec<PathBuf> = dirs.iter().map(|d| d.join(NAME)).collect();
    for d in &dirs {
        // From target/debug or target/debug/deps, reach target/.
        for up in d.ancestors().skip(1).take(2) {
            candidates.push(
                up.join("x86_64-unknown-linux-gnu")
                    .join("release")
                    .join(NAME),
            );
        }
    }
    candidates.into_iter().find(|p| p.is_file())
}
