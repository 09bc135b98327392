//! `garrison serve`: watches outposts and serves their sessions until a
//! stop signal.

mod args;

pub use args::{ServeArgs, file_layer, resolve, with_environment_variable};
use tokio_util::sync::CancellationToken;

pub async fn run(args: Box<ServeArgs>) -> anyhow::Result<()> {
    crate::logging::init(args.log_format);
    // Whatever stops the settings from resolving is a configuration error.
    let mut config = resolve(&args).map_err(crate::exit::config)?;
    config.admin_listen = Some(args.listen);
    // The host backend starts each session process through this binary.
    let shim_exe = std::env::current_exe()?;
    let stop = CancellationToken::new();
    crate::signals::on_stop_signal(stop.clone())?;
    orchestrator::serve::serve(config, shim_exe, stop).await
}
