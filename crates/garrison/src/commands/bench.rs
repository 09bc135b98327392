//! `garrison bench`: benchmarks that print numbers, run in-process (`queue`
//! against the emulator, `sandbox` against a sandbox backend) or, for
//! `scale`, with Garrison as a child process whose use is measured. They are not
//! tests: they report figures next to their targets and exit 0 whether or
//! not the targets are met.

mod probe;
mod queue;
mod report;
mod sandbox;
mod scale;

use clap::{Args, Subcommand};

/// `garrison bench <which>`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: BenchCommand,
}

#[derive(Subcommand, Debug)]
enum BenchCommand {
    /// Time from a session being enqueued to its remote connecting at the
    /// gateway, for Garrison's watch-driven loop and for a 3-second polling
    /// loop, plus fleet API requests per session and idle list calls.
    Queue(queue::QueueArgs),
    /// Create -> remote started and destroy latency, snapshot and restore
    /// throughput, and the memory of each sandbox's helpers outside it,
    /// measured on a sandbox backend directly (`local` by default; root).
    Sandbox(sandbox::SandboxArgs),
    /// One Garrison (a child process, host backend) holding --sessions
    /// sessions: its CPU and memory while they idle, fleet API requests and
    /// state-store writes, missed claim deadlines, and the latency of a new
    /// session while the others run.
    Scale(scale::ScaleArgs),
}

pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    // The table goes to stdout; Garrison's own logs would drown it, so only
    // warnings reach stderr unless RUST_LOG asks for more.
    crate::logging::init_with_default(crate::logging::LogFormat::Text, "warn");
    match args.command {
        BenchCommand::Queue(args) => queue::run(args).await,
        BenchCommand::Sandbox(args) => sandbox::run(args).await,
        BenchCommand::Scale(args) => scale::run(args).await,
    }
}
