//! `garrison bench`: the command line of the benchmarks in the `bench` crate
//! (they print figures next to their targets; they are not tests).

use clap::Args;

/// `garrison bench <which>`.
#[derive(Args, Debug)]
pub(crate) struct BenchArgs {
    #[command(subcommand)]
    command: ::bench::BenchCommand,
}

pub(crate) async fn run(args: BenchArgs) -> anyhow::Result<()> {
    // The table goes to stdout; Garrison's own logs would drown it, so only
    // warnings reach stderr unless RUST_LOG asks for more.
    crate::logging::init_with_default(crate::logging::LogFormat::Text, "warn");
    ::bench::run(args.command).await
}
