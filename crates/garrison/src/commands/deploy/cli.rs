//! The options of `garrison deploy <backend>`: one set for every target,
//! worded and bounded as its [`DeployHelp`] says, and read back into
//! [`TargetArgs`].

use std::path::PathBuf;

use clap::{Arg, ArgAction, ArgGroup, ArgMatches, Command, value_parser};
use sandbox::plugin::deploy::DeployHelp;

/// Options of `garrison deploy <backend>`.
#[derive(Debug, Clone)]
pub(super) struct TargetArgs {
    /// The deployment's name.
    pub(super) name: String,
    /// Image of the orchestrator's sandbox.
    pub(super) image: Option<String>,
    /// vCPUs of the orchestrator's sandbox.
    pub(super) cpus: f64,
    /// Memory of the orchestrator's sandbox, MiB.
    pub(super) memory_mb: u64,
    /// Disk of the orchestrator's sandbox, MiB, where the target has the
    /// option.
    pub(super) disk_mb: Option<u64>,
    /// Idle window or lifetime of the orchestrator's sandbox.
    pub(super) timeout_secs: u64,
    /// The Garrison binary copied into the sandbox.
    pub(super) binary: Option<PathBuf>,
    /// TOML settings file, copied into the sandbox.
    pub(super) config: Option<PathBuf>,
    /// `--status`.
    pub(super) status: bool,
    /// `--logs`.
    pub(super) logs: bool,
    /// `--follow`.
    pub(super) follow: bool,
    /// `--terminate`.
    pub(super) terminate: bool,
    /// `garrison serve` options for the deployed serve (after `--`).
    pub(super) serve_args: Vec<String>,
}

/// The subcommand `garrison deploy <name>`.
pub(super) fn command(name: &'static str, help: &'static DeployHelp) -> Command {
    let mut cmd = Command::new(name)
        .about(help.about)
        .long_about(None)
        .after_help(help.after_help)
        .group(ArgGroup::new("mode").args(["status", "logs", "terminate"]))
        .arg(
            Arg::new("name")
                .long("name")
                .env("GARRISON_DEPLOY_NAME")
                .default_value(help.default_name)
                .value_name("NAME")
                .help(help.name)
                .required(false)
                .value_parser(value_parser!(String))
                .action(ArgAction::Set),
        )
        .arg(
            Arg::new("image")
                .long("image")
                .env("GARRISON_DEPLOY_IMAGE")
                .value_name("IMAGE")
                .help(help.image)
                .value_parser(value_parser!(String))
                .action(ArgAction::Set),
        )
        .arg(
            Arg::new("cpus")
                .long("cpus")
                .default_value("1")
                .value_name("N")
                .help("vCPUs of the orchestrator's sandbox")
                .required(false)
                .value_parser(value_parser!(f64))
                .action(ArgAction::Set),
        );
    let memory = Arg::new("memory_mb")
        .long("memory-mb")
        .default_value("2048")
        .value_name("MIB")
        .help("Memory of the orchestrator's sandbox, MiB")
        .required(false)
        .action(ArgAction::Set);
    cmd = cmd.arg(if help.memory_mb_u32 {
        memory.value_parser(value_parser!(u32))
    } else {
        memory.value_parser(value_parser!(u64))
    });
    if let Some(disk) = help.disk_mb {
        cmd = cmd.arg(
            Arg::new("disk_mb")
                .long("disk-mb")
                .default_value("10240")
                .value_name("MIB")
                .help(disk)
                .required(false)
                .value_parser(value_parser!(u64))
                .action(ArgAction::Set),
        );
    }
    let timeout = Arg::new("timeout_secs")
        .long("timeout-secs")
        .default_value("86400")
        .value_name("SECS")
        .help(help.timeout_secs)
        .required(false)
        .action(ArgAction::Set);
    cmd = cmd.arg(match help.timeout_range {
        Some((low, high)) => {
            timeout.value_parser(value_parser!(u32).range(i64::from(low)..=i64::from(high)))
        }
        None => timeout.value_parser(value_parser!(u64)),
    });
    cmd.arg(
        Arg::new("binary")
            .long("binary")
            .value_name("FILE")
            .help("The Garrison binary copied into the sandbox (Linux x86-64) [default: this one]")
            .value_parser(value_parser!(PathBuf))
            .action(ArgAction::Set),
    )
    .arg(
        Arg::new("config")
            .long("config")
            .env("GARRISON_CONFIG_FILE")
            .value_name("FILE")
            .help(
                "TOML settings file, copied into the sandbox for the deployed serve \
                 [default: $GARRISON_CONFIG/garrison.toml, if it exists]",
            )
            .value_parser(value_parser!(PathBuf))
            .action(ArgAction::Set),
    )
    .arg(flag("status", help.status))
    .arg(flag(
        "logs",
        "Print the deployed serve's output; change nothing",
    ))
    .arg(flag("follow", help.follow).short('f').requires("logs"))
    .arg(flag("terminate", help.terminate))
    .arg(
        Arg::new("serve_args")
            .last(true)
            .value_name("SERVE_ARGS")
            .help("`garrison serve` options for the deployed serve (after `--`)")
            .num_args(1..)
            .value_parser(value_parser!(String))
            .action(ArgAction::Append),
    )
}

fn flag(name: &'static str, help: &'static str) -> Arg {
    Arg::new(name)
        .long(name)
        .help(help)
        .action(ArgAction::SetTrue)
}

impl TargetArgs {
    /// The options of a [`command`] built from `help`, as parsed.
    pub(super) fn from_matches(m: &ArgMatches, help: &DeployHelp) -> Self {
        let memory_mb = if help.memory_mb_u32 {
            m.get_one::<u32>("memory_mb").copied().map(u64::from)
        } else {
            m.get_one::<u64>("memory_mb").copied()
        };
        let timeout_secs = match help.timeout_range {
            Some(_) => m.get_one::<u32>("timeout_secs").copied().map(u64::from),
            None => m.get_one::<u64>("timeout_secs").copied(),
        };
        Self {
            name: m.get_one::<String>("name").cloned().unwrap_or_default(),
            image: m.get_one::<String>("image").cloned(),
            cpus: m.get_one::<f64>("cpus").copied().unwrap_or(1.0),
            memory_mb: memory_mb.unwrap_or(2048),
            disk_mb: help
                .disk_mb
                .and_then(|_| m.get_one::<u64>("disk_mb").copied()),
            timeout_secs: timeout_secs.unwrap_or(86_400),
            binary: m.get_one::<PathBuf>("binary").cloned(),
            config: m.get_one::<PathBuf>("config").cloned(),
            status: m.get_flag("status"),
            logs: m.get_flag("logs"),
            follow: m.get_flag("follow"),
            terminate: m.get_flag("terminate"),
            serve_args: m
                .get_many::<String>("serve_args")
                .map(|v| v.cloned().collect())
                .unwrap_or_default(),
        }
    }
}
