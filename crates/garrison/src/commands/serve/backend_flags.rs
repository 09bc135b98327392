//! The flags of backends' settings: declared by each plug-in (those with a
//! flag; never a secret), added to `garrison serve`'s command line and read
//! back by the setting's file key.

use std::collections::BTreeMap;

use orchestrator::settings::Setting;
use orchestrator::settings::names::Kind;

/// The flags of backends' settings, from each plug-in's table (those
/// declared with a flag; never a secret), by the setting's file key.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct BackendFlags(pub BTreeMap<&'static str, String>);

/// Backends' settings that have a flag.
pub(super) fn backend_flag_settings() -> impl Iterator<Item = &'static Setting> {
    crate::backends::ALL
        .iter()
        .flat_map(|b| b.settings())
        .filter(|s| s.flag.is_some() && !s.secret)
}

impl clap::FromArgMatches for BackendFlags {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let mut flags = BTreeMap::new();
        for setting in backend_flag_settings() {
            // A list's flag may be repeated: its values joined with commas,
            // as a variable would give them.
            if let Some(values) = matches.get_many::<String>(setting.name) {
                let values: Vec<&str> = values.map(String::as_str).collect();
                flags.insert(setting.name, values.join(","));
            }
        }
        Ok(Self(flags))
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl clap::Args for BackendFlags {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        backend_flag_settings().fold(cmd, |cmd, setting| {
            let backend = crate::backends::ALL
                .iter()
                .find(|b| b.settings().iter().any(|s| s.name == setting.name))
                .map(|b| b.name())
                .unwrap_or_default();
            let mut help = format!("{} (--backend {backend})", setting.help());
            if let Some(var) = setting.env {
                help.push_str(&format!(" [env: {var}]"));
            }
            let mut arg = clap::Arg::new(setting.name)
                .long(setting.long().unwrap_or(setting.name))
                .help(help)
                .allow_negative_numbers(setting.kind.is_number());
            arg = match setting.kind {
                // `--desktop` alone turns it on; `--userns=false` off.
                Kind::Bool => arg
                    .value_name("true|false")
                    .num_args(0..=1)
                    .require_equals(true)
                    .default_missing_value("true"),
                Kind::List => arg.value_name("VALUE").action(clap::ArgAction::Append),
                // The accepted words are in the help.
                _ => arg.value_name("VALUE"),
            };
            cmd.arg(arg)
        })
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}
