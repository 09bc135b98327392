//! `garrison`: serves Devin Outposts sessions in isolated sandboxes.

mod admin_client;
mod backends;
mod commands;
mod format;
mod limits;
mod logging;
mod signals;
mod store_fallback;

use clap::Parser;

#[derive(Parser)]
#[command(
    name = "garrison",
    version,
    about = "Orchestrator for Devin Outposts: claims queued Devin sessions and runs each in its own sandbox",
    long_about = None,
)]
struct Cli {
    #[command(subcommand)]
    command: commands::Command,
}

fn main() -> anyhow::Result<()> {
    // The host backend starts each session process through this binary: the
    // shim must not parse arguments, start a runtime or log anything.
    let args: Vec<String> = std::env::args().collect();
    if let Some(code) = sandbox::shim::dispatch(&args) {
        std::process::exit(code);
    }
    limits::raise_open_files();
    let cli = Cli::parse();
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(commands::run(cli.command))
}
