//! What a chaos run records, as plain data: the faults injected (kind,
//! host, when), each host's readiness and exits, each session's transcript
//! from the emulator and the workspaces the bench expects it to see, and
//! whatever was left behind at the end. The checker reads only this.

use emulator::SessionView;

/// A kind of fault, named as in the JSON report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum FaultKind {
    /// SIGKILL, then a new `garrison serve` on the same state.
    KillRestart,
    /// SIGSTOP for longer than a claim lives, then SIGCONT.
    Pause,
    /// The host's packets to the fleet API (and gateway) dropped.
    CutFleet,
    /// The host's packets to the object store dropped.
    CutStore,
    /// Both of the above.
    CutBoth,
    /// A burst of 500/503 answers from the fleet API (every host).
    ApiErrors,
    /// Fleet API changes made but their answers lost (every host).
    LostAnswers,
    /// The host's state directory filled up, then freed.
    DiskFull,
    /// The host's wall clock stepped forward or back, then back to true
    /// (its Garrison's only: libfaketime, see `clock`).
    ClockStep,
}

impl FaultKind {
    /// Every kind, in report order.
    pub(crate) const ALL: [FaultKind; 9] = [
        FaultKind::KillRestart,
        FaultKind::Pause,
        FaultKind::CutFleet,
        FaultKind::CutStore,
        FaultKind::CutBoth,
        FaultKind::ApiErrors,
        FaultKind::LostAnswers,
        FaultKind::DiskFull,
        FaultKind::ClockStep,
    ];

    /// The name in the JSON report.
    pub(crate) fn name(self) -> &'static str {
        match self {
            FaultKind::KillRestart => "kill_restart",
            FaultKind::Pause => "pause",
            FaultKind::CutFleet => "cut_fleet",
            FaultKind::CutStore => "cut_store",
            FaultKind::CutBoth => "cut_both",
            FaultKind::ApiErrors => "api_errors",
            FaultKind::LostAnswers => "lost_answers",
            FaultKind::DiskFull => "disk_full",
            FaultKind::ClockStep => "clock_step",
        }
    }

    /// Whether the fault hits one host (else the fleet API, for all).
    pub(crate) fn per_host(self) -> bool {
        !matches!(self, FaultKind::ApiErrors | FaultKind::LostAnswers)
    }

    /// Whether the host's Garrison is not running while it lasts.
    pub(crate) fn stops_acceptor(self) -> bool {
        matches!(self, FaultKind::KillRestart | FaultKind::Pause)
    }

    /// Whether the host's remotes lose the gateway while it lasts.
    pub(crate) fn cuts_gateway(self) -> bool {
        matches!(self, FaultKind::CutFleet | FaultKind::CutBoth)
    }
}

/// One injected fault. Times are Unix milliseconds (the emulator's clock).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct FaultRecord {
    /// What.
    pub kind: FaultKind,
    /// On which host; `None` for the fleet API's faults.
    pub host: Option<usize>,
    /// Injected at.
    pub start_ms: i64,
    /// Healed at; `None` while it lasts.
    pub end_ms: Option<i64>,
}

impl FaultRecord {
    /// Whether the fault touches host `n`.
    pub(crate) fn affects(&self, n: usize) -> bool {
        self.host.is_none_or(|h| h == n)
    }

    /// Healed at, or `end` if it never was.
    pub(crate) fn end_or(&self, end: i64) -> i64 {
        self.end_ms.unwrap_or(end)
    }
}

/// A Garrison that exited without being killed.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Exit {
    /// When the bench saw it gone.
    pub at_ms: i64,
    /// Its exit status, and the end of its log.
    pub what: String,
}

/// One host as the bench watched it.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct HostHistory {
    /// Its Garrison's acceptor id.
    pub acceptor: String,
    /// Its address on the bridge (what the gateway records as the peer).
    pub addr: String,
    /// Readiness changes seen by polling `/readyz`: (when, ready).
    pub readiness: Vec<(i64, bool)>,
    /// Exits the bench did not cause.
    pub exits: Vec<Exit>,
}

/// One session: what the emulator recorded, and for a session that
/// suspends, the note each phase wrote (phase k's resume must find the
/// note of phase k-1).
#[derive(Clone, Debug)]
pub(crate) struct SessionHistory {
    /// The emulator's view at the end, transcript included.
    pub view: SessionView,
    /// Notes written by each phase, in order; empty for a session that
    /// never suspends.
    pub notes: Vec<String>,
}

/// Something an ended session left behind.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Leftover {
    /// The host it was found on (`None`: the bucket).
    pub host: Option<usize>,
    /// A sandbox directory, snapshot file or object key.
    pub path: String,
}

/// The whole run.
#[derive(Clone, Debug, Default)]
pub(crate) struct History {
    /// The claims' lifetime.
    pub claim_ttl_ms: i64,
    /// How close to its deadline Garrison renews such a claim.
    pub renew_margin_ms: i64,
    /// How soon after a heal a host must be ready again.
    pub ready_within_ms: i64,
    /// When the run's observation ended.
    pub end_ms: i64,
    /// Every fault injected.
    pub faults: Vec<FaultRecord>,
    /// Every host, by index.
    pub hosts: Vec<HostHistory>,
    /// Every session.
    pub sessions: Vec<SessionHistory>,
    /// What was left at the end.
    pub leftovers: Vec<Leftover>,
    /// Sessions some host recorded `final_status_unknown` for: their
    /// snapshots are kept for the retention period (see `kept.rs`).
    pub final_status_unknown: std::collections::BTreeSet<String>,
}

impl History {
    /// The host with this address.
    pub(crate) fn host_of_addr(&self, addr: &str) -> Option<usize> {
        self.hosts.iter().position(|h| h.addr == addr)
    }

    /// The acceptor id of the host at `addr`.
    pub(crate) fn acceptor_of_addr(&self, addr: &str) -> Option<String> {
        let host = self.host_of_addr(addr)?;
        Some(self.hosts[host].acceptor.clone())
    }
}
