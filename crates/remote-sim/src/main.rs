//! `devin-remote-sim`: the stand-in for Devin's `devin-remote serve`.
//!
//! It honours the spawn contract (see `docs/outposts-protocol.md`, "Spawn
//! contract"): it reads the gateway URL, connect token and session id from
//! the environment, dials the gateway, runs the shell commands and file
//! writes the gateway sends, and exits 0 when told that the session slept or
//! ended. It only ever dials the project's emulator, so it speaks plain
//! `ws://` (no TLS) and the protocol in the `gateway-proto` crate.
//!
//! Exit codes (see [`exit::Outcome`]):
//!
//! | code | meaning |
//! | --- | --- |
//! | 0 | the gateway said the session slept or ended; socket closed cleanly |
//! | 1 | the connection was lost or broken before sleep/end |
//! | 2 | usage or configuration error (missing variable, bad URL, state dir) |
//! | 3 | the gateway refused the handshake (e.g. 401, 403, 409) |
//! | 4 | the gateway could not be reached within the connect budget (~30 s) |
//! | N | the gateway sent `crash` with code N |

mod config;
mod dial;
mod exit;
mod session;
mod state;
mod steps;

use exit::Outcome;

const USAGE: &str = "\
usage: devin-remote-sim serve
       devin-remote-sim --version

Stand-in for devin-remote. `serve` reads DEVIN_OUTPOST_GATEWAY_URL,
DEVIN_OUTPOST_CONNECT_TOKEN and DEVIN_OUTPOST_SESSION_ID (all required) and
DEVIN_REMOTE_STATE_DIR (optional) from the environment, dials the gateway and
runs what it sends until the session sleeps or ends. A DEVIN_CHROME_PATH that
is not an executable file is refused at start (exit code 2).";

/// The simulator's version, printed by `--version` and sent in its hello.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let outcome = match args.as_slice() {
        ["serve"] => serve(),
        ["--version" | "-V"] => {
            println!("devin-remote-sim {VERSION}");
            Outcome::Clean
        }
        ["--help" | "-h"] => {
            println!("{USAGE}");
            Outcome::Clean
        }
        _ => {
            eprintln!("{USAGE}");
            Outcome::Usage
        }
    };
    std::process::exit(outcome.code());
}

fn serve() -> Outcome {
    let config = match config::Config::from_env(|name| std::env::var(name).ok()) {
        Ok(config) => config,
        Err(err) => {
            eprintln!("devin-remote-sim: {err}");
            return Outcome::Usage;
        }
    };
    // The real remote's browser tool would use it; saying so in the session
    // log shows which browser a session was given.
    if let Some(chrome) = &config.chrome_path {
        eprintln!("devin-remote-sim: browser at {}", chrome.display());
    }
    // One thread is plenty: the simulator does one thing at a time, and a
    // small runtime keeps the static binary lean.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("devin-remote-sim: cannot start the runtime: {err}");
            return Outcome::Lost;
        }
    };
    runtime.block_on(session::serve(config))
}
