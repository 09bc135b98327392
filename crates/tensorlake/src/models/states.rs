//! The states and kinds Tensorlake's answers name, as open enums: a value
//! a newer service sends is kept as `Unknown`, never a parse failure.

common::open_enum!(
    /// A sandbox's lifecycle state.
    pub enum SandboxStatus {
        Pending = "pending",
        Running = "running",
        Snapshotting = "snapshotting",
        Suspending = "suspending",
        Suspended = "suspended",
        Terminated = "terminated",
        Timeout = "timeout",
        Failed = "failed",
    }
);

impl SandboxStatus {
    /// The sandbox is gone for good.
    pub fn is_final(&self) -> bool {
        matches!(self, Self::Terminated | Self::Timeout | Self::Failed)
    }
}

common::open_enum!(
    /// A snapshot's state.
    pub enum SnapshotStatus {
        InProgress = "in_progress",
        LocalReady = "local_ready",
        Completed = "completed",
        Replicating = "replicating",
        Failed = "failed",
        Deleting = "deleting",
    }
);

impl SnapshotStatus {
    /// A sandbox can be restored from it (the SDK waits for `local_ready`
    /// by default; `completed` only adds replication).
    pub fn is_usable(&self) -> bool {
        matches!(self, Self::LocalReady | Self::Replicating | Self::Completed)
    }

    /// It will never be usable.
    pub fn is_dead(&self) -> bool {
        matches!(self, Self::Failed | Self::Deleting)
    }
}

common::open_enum!(
    /// What a snapshot keeps.
    pub enum SnapshotType {
        Memory = "memory",
        Filesystem = "filesystem",
    }
);

common::open_enum!(
    /// A process's state as the sandbox daemon reports it.
    pub enum ProcessState {
        Running = "running",
        Exited = "exited",
        Signaled = "signaled",
        OomKilled = "oom_killed",
    }
);

common::open_enum!(
    /// When the daemon restarts a managed process.
    pub enum RestartPolicy {
        Never = "never",
        OnFailure = "on_failure",
        Always = "always",
    }
);
