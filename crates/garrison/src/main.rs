//! `garrison`: serves Devin Outposts sessions in isolated sandboxes.

mod admin_client;
mod backends;
mod commands;
#[cfg(test)]
mod docs_reference;
mod exit;
mod format;
mod help;
mod limits;
mod logging;
mod output;
mod signals;
mod store_fallback;
mod verbosity;

use clap::{CommandFactory, FromArgMatches, Parser};

#[derive(Parser)]
#[command(
    name = "garrison",
    version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("GARRISON_COMMIT"), ")"),
    about = "Orchestrator for Devin Outposts: claims queued Devin sessions and runs each in its own sandbox",
    long_about = None,
)]
struct Cli {
    /// Only errors on stderr: no notes, progress or log lines below error
    /// level (results on stdout are unchanged)
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    quiet: bool,

    /// More detail in the log on stderr: -v debug from Garrison's own
    /// crates, -vv debug from all, -vvv trace (wins over RUST_LOG)
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,

    #[command(subcommand)]
    command: commands::Command,
}

/// The whole command line as clap sees it: what is parsed, and what
/// `completions` and `man` describe.
pub fn command() -> clap::Command {
    help::decorate(negative_numbers_as_values(Cli::command()))
}

/// `--max-concurrent -1` is a value, refused by its setting's own check
/// ("-1 is out of range 1..=10000"), not an unknown flag `-1`.
fn negative_numbers_as_values(cmd: clap::Command) -> clap::Command {
    cmd.mut_args(|arg| {
        if arg.get_action().takes_values() {
            arg.allow_negative_numbers(true)
        } else {
            arg
        }
    })
    .mut_subcommands(negative_numbers_as_values)
}

fn main() -> std::process::ExitCode {
    // The host backend starts each session process through this binary: the
    // shim must not parse arguments, start a runtime or log anything.
    let args: Vec<String> = std::env::args().collect();
    if let Some(code) = shim::dispatch(&args) {
        std::process::exit(code);
    }
    limits::raise_open_files();
    let cli = Cli::from_arg_matches(&command().get_matches()).unwrap_or_else(|e| e.exit());
    verbosity::set(cli.quiet, cli.verbose);
    if let Some(level) = cli.command.default_log_level() {
        logging::init_with_default(logging::LogFormat::Text, level);
    }
    // A service keeps running when a reader of its stdout goes away; a
    // command whose output is its work ends quietly (see `output`).
    if !cli.command.is_service() {
        output::quiet_exit_on_closed_stdout_panic();
    }
    let result = tokio::runtime::Runtime::new()
        .map_err(anyhow::Error::from)
        .and_then(|runtime| runtime.block_on(commands::run(cli.command)));
    match result {
        Err(e) if output::is_stdout_closed(&e) => std::process::exit(0),
        // The error's type picks the exit code (see `exit`).
        result => exit::report(result),
    }
}
