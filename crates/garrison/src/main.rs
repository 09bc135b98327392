//! `garrison`: serves Devin Outposts sessions in isolated sandboxes.

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "garrison",
    version,
    about = "Orchestrator for Devin Outposts: claims queued Devin sessions and runs each in its own sandbox",
    long_about = None,
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a local emulator of Devin's control plane (fleet API, gateway,
    /// scripted sessions) for tests and demos.
    Emulate(emulator::cli::EmulateArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        match cli.command {
            Command::Emulate(args) => emulator::cli::run(args).await,
        }
    })
}
