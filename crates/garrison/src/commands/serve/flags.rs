//! The flags of Garrison's own settings: their help from the settings
//! table, and the origin of a value read from one.

use orchestrator::settings::{Origin, Setting, Sourced, names};

/// `value`, read from `setting`'s flag.
pub(super) fn flag<T>(value: T, setting: Setting) -> Sourced<T> {
    // Every setting read from a flag has one (secrets are never flags).
    Sourced::new(value, Origin::Flag(setting.flag.unwrap_or("--")))
}

/// The setting whose flag `arg` is, if any.
fn setting_of(arg: &clap::Arg) -> Option<&'static Setting> {
    let long = arg.get_long()?;
    names::ALL.iter().find(|s| s.long() == Some(long))
}

/// A setting's flag as the table declares it: its help, accepted values,
/// default and environment variable; numbers may be negative so that
/// validation, not the parser, says what is wrong with `-1`.
pub(super) fn setting_help(arg: clap::Arg) -> clap::Arg {
    let Some(setting) = setting_of(&arg) else {
        return arg;
    };
    let mut help = setting.help();
    if setting.kind == names::Kind::Backend {
        // The registry is the garrison crate's: the table cannot list it.
        help = help.replacen(
            setting.doc,
            &format!("{}: {}", setting.doc, crate::backends::help()),
            1,
        );
    }
    if let Some(var) = setting.env {
        help.push_str(&format!(" [env: {var}]"));
    }
    arg.help(help)
        .allow_negative_numbers(setting.kind.is_number())
}

/// Ends the help of a setting's flag with its environment variable, as
/// clap's own `env` would show it, from [`names::ALL`] (so the two cannot
/// drift), for commands that take a few of serve's settings with help of
/// their own. Flags that are not settings are left as they are.
pub(crate) fn with_environment_variable(arg: clap::Arg) -> clap::Arg {
    let Some(var) = setting_of(&arg).and_then(|s| s.env) else {
        return arg;
    };
    let suffix = |help: &clap::builder::StyledStr| format!("{help} [env: {var}]");
    let help = arg.get_help().map(suffix);
    let long_help = arg.get_long_help().map(suffix);
    let arg = match help {
        Some(help) => arg.help(help),
        None => arg,
    };
    match long_help {
        Some(long_help) => arg.long_help(long_help),
        None => arg,
    }
}
