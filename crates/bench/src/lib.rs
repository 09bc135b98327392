//! `garrison bench`: benchmarks that print numbers, run in-process (`queue`
//! against the emulator, `sandbox` against a sandbox backend) or, for
//! `scale`, with Garrison as a child process whose use is measured; `chaos`
//! runs several Garrisons under injected faults and counts the invariants
//! they broke. They are not tests: they report figures (next to their
//! targets) and exit 0 whether or not the targets are met.
//!
//! The `garrison` binary parses [`BenchCommand`] and calls [`run`]; `sandbox`
//! and `scale` start this same binary again (as the shim, or as `garrison
//! serve`), so they only work from inside it.

mod chaos;
mod probe;
mod queue;
mod report;
mod sandbox;
mod scale;

use clap::Subcommand;

pub use self::chaos::ChaosArgs;
pub use self::queue::QueueArgs;
pub use self::sandbox::SandboxArgs;
pub use self::scale::ScaleArgs;

/// `garrison bench <which>`.
#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Time from a session being enqueued to its remote connecting at the
    /// gateway, for Garrison's watch-driven loop and for a 3-second polling
    /// loop, plus fleet API requests per session and idle list calls.
    Queue(QueueArgs),
    /// Create -> remote started and destroy latency, snapshot and restore
    /// throughput, and the memory of each sandbox's helpers outside it,
    /// measured on a sandbox backend directly (`local` by default; root).
    Sandbox(SandboxArgs),
    /// One Garrison (a child process, host backend) holding --sessions
    /// sessions: its CPU and memory while they idle, fleet API requests and
    /// state-store writes, missed claim deadlines, and the latency of a new
    /// session while the others run.
    Scale(ScaleArgs),
    /// Three Garrisons in network namespaces share one outpost and one S3
    /// bucket while a seeded scheduler kills, pauses, cuts off and starves
    /// them and steps their clocks (root); a checker then goes over the
    /// whole history and reports violations by invariant.
    Chaos(ChaosArgs),
}

/// Runs one benchmark: progress on stderr, the table (and with `--json` one
/// JSON line) on stdout. Logging is the caller's to set up.
pub async fn run(command: BenchCommand) -> anyhow::Result<()> {
    match command {
        BenchCommand::Queue(args) => queue::run(args).await,
        BenchCommand::Sandbox(args) => sandbox::run(args).await,
        BenchCommand::Scale(args) => scale::run(args).await,
        BenchCommand::Chaos(args) => chaos::run(args).await,
    }
}
