//! Process-wide structured logging.

use tracing_subscriber::EnvFilter;

pub use crate::commands::serve::LogFormat;

/// Installs the subscriber: `RUST_LOG` when set, else `info`.
pub fn init(format: LogFormat) {
    init_with_default(format, "info");
}

/// Installs the subscriber: `RUST_LOG` when set, else `default`.
pub fn init_with_default(format: LogFormat, default: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}
