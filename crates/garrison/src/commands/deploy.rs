//! `garrison deploy <backend>`: Garrison itself in a long-lived, named
//! sandbox of the cloud it serves sessions on, for every backend whose
//! plug-in has a [`DeployTarget`] (Tensorlake and Modal today).
//!
//! This side is the CLI's: the options ([`cli`]), the settings resolved as
//! the deployed serve will resolve them and its environment as far as
//! Devin and Garrison go ([`settings`]), and where the backend's report is
//! printed ([`output`]). Finding, creating or resuming the sandbox and
//! starting serve in it is the backend's ([`sandbox::plugin::deploy`]).
//!
//! Every run converges: the sandbox is created if there is none by that
//! name (resumed if suspended), and the serve process started if none runs.
//! So the same command, run every few minutes by cron or a systemd timer,
//! is the keep-alive. The credentials are given to the deployed serve in
//! its environment: never in an image, never in argv, never printed.

mod cli;
mod output;
mod settings;

use std::io::Write;

use anyhow::Context;
use clap::{ArgMatches, Args, Command, FromArgMatches};
use sandbox::plugin::BackendPlugin;
use sandbox::plugin::deploy::{DeployRequest, DeployTarget};

use crate::backends;
use cli::TargetArgs;

/// Exit status of `--status` when serve is not running.
const NOT_RUNNING: i32 = 3;

/// `garrison deploy`'s subcommand: which target, with its options.
#[derive(Debug)]
pub(crate) struct DeployArgs {
    backend: &'static dyn BackendPlugin,
    args: TargetArgs,
}

/// Each backend that can host a deployment, with its target.
fn targets() -> impl Iterator<Item = (&'static dyn BackendPlugin, &'static dyn DeployTarget)> {
    backends::ALL
        .iter()
        .filter_map(|b| Some((*b, b.deploy_target()?)))
}

impl Args for DeployArgs {
    fn augment_args(cmd: Command) -> Command {
        targets()
            .fold(cmd, |cmd, (backend, target)| {
                cmd.subcommand(cli::command(backend.name(), target.help()))
            })
            .subcommand_required(true)
            .arg_required_else_help(true)
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

impl FromArgMatches for DeployArgs {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let Some((name, sub)) = matches.subcommand() else {
            return Err(clap::Error::raw(
                clap::error::ErrorKind::MissingSubcommand,
                "a subcommand is required but one was not provided",
            ));
        };
        let Some((backend, target)) = targets().find(|(b, _)| b.name() == name) else {
            return Err(clap::Error::raw(
                clap::error::ErrorKind::InvalidSubcommand,
                format!("the subcommand '{name}' wasn't recognized"),
            ));
        };
        Ok(Self {
            backend,
            args: TargetArgs::from_matches(sub, target.help()),
        })
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

/// Runs `garrison deploy <backend>`.
pub(crate) async fn run(deploy: DeployArgs) -> anyhow::Result<()> {
    let DeployArgs { backend, args } = deploy;
    let target = backend.deploy_target().context("no deploy target")?;
    target.check_name(&args.name).map_err(anyhow::Error::msg)?;
    let mut out = output::Terminal;
    if args.status || args.logs || args.terminate {
        // The backend's settings alone: no Devin token needed to look.
        let configured = backends::configure_required(backend, args.config.as_deref())?;
        let deployment = configured
            .deployment()
            .context("the backend has no deployments")?;
        if args.status {
            if !deployment.status(&args.name, &mut out).await? {
                std::io::stdout().flush()?;
                std::process::exit(NOT_RUNNING);
            }
            return Ok(());
        }
        if args.logs {
            return deployment.logs(&args.name, args.follow, &mut out).await;
        }
        return deployment.terminate(&args.name, &mut out).await;
    }
    settings::check_serve_args(&args.serve_args).map_err(anyhow::Error::msg)?;
    let resolved = settings::resolve(backend.name(), &args)?;
    let configured = resolved
        .config
        .backends
        .get(backend.name())
        .with_context(|| format!("no outpost is served with the {} backend", backend.name()))?;
    let deployment = configured
        .deployment()
        .context("the backend has no deployments")?;
    let request = DeployRequest {
        name: args.name,
        image: args.image,
        cpus: args.cpus,
        memory_mb: args.memory_mb,
        disk_mb: args.disk_mb,
        timeout_secs: args.timeout_secs,
        binary: args.binary,
        serve_env: settings::devin_env(&resolved.config, &resolved.host_vars),
        acceptor_id: resolved.config.acceptor_id.clone(),
        state_dir: resolved.config.state_dir.clone(),
        config_file: resolved.config_file,
        serve_args: args.serve_args,
    };
    deployment.ensure(&request, &mut out).await
}
