//! The book's generated reference pages: `docs/src/reference/cli.md` (every
//! command's `--help`, from the same clap definitions the binary parses)
//! and `docs/src/reference/settings.md` (from the settings tables that
//! `--help`, the file reader and `garrison.toml.example` read). The tests
//! below compare them with the committed pages, so the book cannot drift
//! from the code; `GARRISON_UPDATE_DOCS=1 cargo test -p garrison
//! docs_reference` (or `scripts/docs --regenerate`) rewrites them.

use std::path::{Path, PathBuf};

use common::settings::{DefaultValue, Kind, Setting};
use orchestrator::settings;

use crate::backends;

/// Where the book's sources are, from this crate.
fn book_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/src")
}

const GENERATED: &str = "<!-- Generated from the code by `scripts/docs --regenerate` \
     (GARRISON_UPDATE_DOCS=1 cargo test -p garrison docs_reference); do not edit. -->";

/// The CLI reference: each command's long help, in the order `garrison
/// --help` lists them, subcommands after their parent.
pub(crate) fn cli_page() -> String {
    let mut root = hide_env_values(crate::command());
    root.build();
    let mut out = format!(
        "# Command-line reference\n\n{GENERATED}\n\n\
         Every command's `--help`, as this build prints it. Each ends with \
         its examples and exit status.\n"
    );
    push_command(&mut out, &mut root, "garrison");
    out
}

/// A value taken from the environment would make the page depend on the
/// machine that generated it; only the variable's name is shown.
fn hide_env_values(cmd: clap::Command) -> clap::Command {
    cmd.mut_args(|arg| arg.hide_env_values(true))
        .mut_subcommands(hide_env_values)
}

fn push_command(out: &mut String, cmd: &mut clap::Command, path: &str) {
    let help = cmd.render_long_help().to_string();
    out.push_str(&format!(
        "\n## `{path}`\n\n```text\n{}\n```\n",
        help.trim_end()
    ));
    for sub in cmd.get_subcommands_mut() {
        if sub.get_name() == "help" || sub.is_hide_set() {
            continue;
        }
        let path = format!("{path} {}", sub.get_name());
        push_command(out, sub, &path);
    }
}

/// The settings reference: Garrison's own table, then each backend's.
pub(crate) fn settings_page() -> String {
    let mut out = format!(
        "# Settings reference\n\n{GENERATED}\n\n\
         Every setting of `garrison serve`. A flag beats its environment \
         variable, which beats the key in `garrison.toml`, which beats the \
         default. A secret is read from its variable only (never a flag, \
         never the file). The file's keys may be set per `[[outpost]]` table \
         where the last column says so. [Configure](../guide/configure.md) \
         says how the layers combine; \
         `packaging/garrison.toml.example` is the same table as a file.\n\n\
         ## Garrison\n\n"
    );
    push_table(&mut out, settings::names::ALL);
    for backend in backends::ALL.iter().filter(|b| !b.settings().is_empty()) {
        out.push_str(&format!(
            "\n## The `{name}` backend\n\nRead only when an outpost uses it \
             (`--backend {name}`).\n\n",
            name = backend.name()
        ));
        push_table(&mut out, backend.settings());
    }
    out
}

fn push_table(out: &mut String, table: &[Setting]) {
    out.push_str(
        "| file key | flag | variable | values | default | meaning | per outpost |\n\
         | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for s in table {
        let key = if s.in_file {
            code(s.name)
        } else if s.secret {
            "(secret)".to_owned()
        } else {
            "-".to_owned()
        };
        let default = match s.default {
            DefaultValue::Value(v) => code(v),
            DefaultValue::Described(text) => cell(text),
            DefaultValue::None => "-".to_owned(),
        };
        out.push_str(&format!(
            "| {key} | {} | {} | {} | {default} | {} | {} |\n",
            s.flag.map_or("-".to_owned(), code),
            s.env.map_or("-".to_owned(), code),
            values(s),
            cell(s.doc),
            if s.per_outpost { "yes" } else { "-" },
        ));
    }
}

/// The values a setting takes, in words (the backends by name).
fn values(setting: &Setting) -> String {
    match setting.kind {
        Kind::Backend => backends::names(),
        kind => kind.describe().map_or("-".to_owned(), |v| cell(&v)),
    }
}

/// Text for a table cell: no column breaks, no HTML.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A code span in a table cell.
fn code(text: &str) -> String {
    format!("`{}`", text.replace('|', "\\|"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Compares `generated` with the committed page; rewrites the page
    /// instead when `GARRISON_UPDATE_DOCS` is set.
    fn check(page: &str, generated: &str) {
        let path = book_src().join(page);
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        if committed != generated && std::env::var_os("GARRISON_UPDATE_DOCS").is_some() {
            std::fs::write(&path, generated).expect("rewrite the page");
            return;
        }
        assert!(
            committed == generated,
            "{} is not what the code generates; run scripts/docs --regenerate",
            path.display()
        );
    }

    #[test]
    fn the_books_cli_reference_is_generated_from_clap() {
        let page = cli_page();
        for command in ["## `garrison serve`", "## `garrison image prune`"] {
            assert!(page.contains(command), "no {command}");
        }
        check("reference/cli.md", &page);
    }

    #[test]
    fn the_books_settings_reference_is_generated_from_the_settings_tables() {
        let page = settings_page();
        let all = settings::names::ALL
            .iter()
            .chain(backends::ALL.iter().flat_map(|b| b.settings()));
        for setting in all {
            if let Some(var) = setting.env {
                assert!(page.contains(&format!("`{var}`")), "no {var}");
            }
        }
        check("reference/settings.md", &page);
    }
}
