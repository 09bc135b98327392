//! `garrison serve`: watches outposts and serves their sessions until a
//! stop signal.

mod args;
mod backend_flags;
mod flags;
mod resolve;
#[cfg(test)]
mod tests;

pub(crate) use args::ServeArgs;
pub(crate) use flags::with_environment_variable;
pub(crate) use resolve::{file_layer, resolve, resolve_all};
use tokio_util::sync::CancellationToken;

pub(crate) async fn run(args: Box<ServeArgs>) -> anyhow::Result<()> {
    // Resolved before the log is set up, as the log's format is a setting.
    // Whatever stops the settings from resolving is a configuration error.
    let (mut config, process) = resolve_all(&args).map_err(|e| crate::exit::config(e.into()))?;
    crate::logging::init(process.log_format);
    config.admin_listen = Some(process.listen);
    // The host backend starts each session process through this binary.
    let shim_exe = std::env::current_exe()?;
    let stop = CancellationToken::new();
    crate::signals::on_stop_signal(stop.clone())?;
    orchestrator::serve(config, shim_exe, stop).await
}
