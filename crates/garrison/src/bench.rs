//! `garrison bench`: benchmarks that print numbers, run in-process against
//! the emulator. They are not tests: they report figures next to their
//! targets and exit 0 whether or not the targets are met.

mod probe;
mod queue;
mod report;

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
}

pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    // The table goes to stdout; Garrison's own logs would drown it, so only
    // warnings reach stderr unless RUST_LOG asks for more.
    crate::logging::init_with_default(crate::logging::LogFormat::Text, "warn");
    match args.command {
        BenchCommand::Queue(args) => queue::run(args).await,
    }
}
