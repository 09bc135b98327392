//! Process-wide structured logging.

use clap::ValueEnum;
use tracing_subscriber::EnvFilter;

/// How log lines are written (`serve --log-format`).
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the subscriber: `RUST_LOG` when set, else `info`.
pub fn init(format: LogFormat) {
    init_with_default(format, "info");
}

/// Installs the subscriber: `-q`/`-v`, else `RUST_LOG` when set, else
/// `default` (see [`crate::verbosity`]).
pub fn init_with_default(format: LogFormat, default: &str) {
    let filter: EnvFilter = crate::verbosity::filter(default);
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}
