//! `garrison.toml.example`, written from the settings tables: Garrison's
//! own ([`names::ALL`]) and each backend's. The packaged file is this
//! text; a test compares the two, so a setting cannot be added, renamed or
//! given a new range without the example following.

use common::settings::{DefaultValue, Kind, Setting};

use super::names;
use super::validate::Backends;

const HEADER: &str = "\
# /etc/garrison/garrison.toml: settings of `garrison serve`.
#
# Generated from Garrison's table of settings (`cargo test -p garrison
# example_file` checks it; GARRISON_UPDATE_EXAMPLE=1 rewrites it).
#
# Every key is optional. Flags beat environment variables, which beat this
# file, which beats the defaults shown here. Unknown keys are errors (a typo
# must not be silently ignored). Secrets are never in this file: the token
# comes from DEVIN_OUTPOSTS_TOKEN (/etc/garrison/env, chmod 600) or from
# /etc/garrison/credentials.json written by `garrison connect`.
#
# Check a file with: garrison doctor --config /etc/garrison/garrison.toml
";

const OUTPOSTS: &str = "\
[[outpost]]
id = \"outpost_env-aaa\"

[[outpost]]
id = \"outpost_env-bbb\"
backend = \"host\"
max_concurrent = 2
cpus = 8
memory_mb = 16384
disk_mb = 20480
# image = \"default\"
# repos = [\"https://github.com/acme/api.git\"]
# The platform whose sessions are claimed: linux (the only one Garrison
# serves today), macos or windows.
platform = \"linux\"
";

/// The text of `garrison.toml.example`.
pub fn example_file(backends: &Backends) -> String {
    let mut out = HEADER.to_owned();
    for setting in names::ALL {
        push_setting(&mut out, setting, false, backends);
    }
    for backend in backends.iter().filter(|b| !b.settings().is_empty()) {
        out.push('\n');
        comment(
            &mut out,
            &format!(
                "The {name} backend's settings, read only when an outpost uses it \
                 (--backend {name}):",
                name = backend.name()
            ),
        );
        for setting in backend.settings() {
            push_setting(&mut out, setting, true, backends);
        }
    }
    out.push('\n');
    comment(
        &mut out,
        &format!(
            "The outposts to serve. Without any [[outpost]] table (and no --outpost or \
             OUTPOST_ID), the outpost saved by `garrison connect` is served. A table's \
             keys override the settings above for that outpost only: {}.",
            names::outpost_keys().collect::<Vec<_>>().join(", ")
        ),
    );
    out.push_str(OUTPOSTS);
    out
}

/// One setting: its help as a comment, then its line (commented out when
/// it has no default value, or belongs to a backend).
fn push_setting(out: &mut String, setting: &Setting, commented: bool, backends: &Backends) {
    if !setting.in_file && !setting.secret {
        // Named by a flag or variable only (the file itself, the outposts).
        return;
    }
    out.push('\n');
    let mut text = setting.doc.to_owned();
    if let Some(values) = setting.kind.describe() {
        text.push_str(&format!(", {values}"));
    }
    if setting.kind == Kind::Backend {
        let names: Vec<String> = backends
            .iter()
            .map(|b| format!("{} ({})", b.name(), b.summary()))
            .collect();
        text.push_str(&format!(": {}", common::settings::or_list(&names)));
    }
    text.push('.');
    if let DefaultValue::Described(default) = setting.default {
        text.push_str(&format!(" Default: {}.", default.trim_end_matches('.')));
    }
    let spellings: Vec<&str> = setting.env.into_iter().chain(setting.flag).collect();
    if setting.secret {
        text.push_str(&format!(
            " From {} in the environment only, never this file.",
            spellings.join(", ")
        ));
        comment(out, &text);
        return;
    }
    if !spellings.is_empty() {
        text.push_str(&format!(" ({})", spellings.join(", ")));
    }
    comment(out, &text);
    let (value, commented) = match (setting.default, setting.example) {
        (DefaultValue::Value(value), _) => (value, commented),
        (_, Some(example)) => (example, true),
        (_, None) => return,
    };
    if commented {
        out.push_str("# ");
    }
    out.push_str(&format!("{} = {value}\n", setting.name));
}

/// `text` as `#` lines of at most 76 characters.
fn comment(out: &mut String, text: &str) {
    let mut line = String::from("#");
    for word in text.split_whitespace() {
        if line.len() + 1 + word.len() > 76 && line.len() > 1 {
            out.push_str(&line);
            out.push('\n');
            line = String::from("#");
        }
        line.push(' ');
        line.push_str(word);
    }
    out.push_str(&line);
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_wrap_at_76_columns() {
        let mut out = String::new();
        comment(&mut out, &"word ".repeat(40));
        assert!(out.lines().all(|l| l.len() <= 76 && l.starts_with("# ")));
        assert_eq!(out.split_whitespace().filter(|w| *w == "word").count(), 40);
    }
}
