//! `garrison serve`'s command line and settings, parsed and resolved.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::{Args, CommandFactory, Parser, Subcommand};
use orchestrator::settings::{self, HostEnv, Origin, Sourced, names};

use super::*;

#[derive(Parser, Debug)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    Serve(ServeArgs),
}

/// Parses `garrison serve <args>`: the flags alone, whatever the
/// process environment holds.
fn parse(args: &[&str]) -> ServeArgs {
    let argv = ["garrison", "serve"].iter().chain(args);
    match Cli::try_parse_from(argv).expect("parses").command {
        Command::Serve(args) => args,
    }
}

fn host(pairs: &[(&str, &str)]) -> HostEnv {
    let vars: BTreeMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    HostEnv::new(1000, vars)
}

/// The flags' part of `garrison serve --help`, one entry per flag (its
/// line and its help), whitespace collapsed.
fn help_entries() -> Vec<String> {
    let mut cmd = Cli::command();
    let help = cmd
        .find_subcommand_mut("serve")
        .expect("serve")
        .render_long_help()
        .to_string();
    let options = help.split("Examples:").next().expect("help");
    let mut entries: Vec<String> = Vec::new();
    for line in options.lines().map(str::trim) {
        if line.starts_with('-') {
            entries.push(String::new());
        }
        if let Some(entry) = entries.last_mut() {
            entry.push_str(line);
            entry.push(' ');
        }
    }
    entries
}

#[test]
fn every_setting_has_its_flag_and_environment_variable() {
    let entries = help_entries();
    for setting in names::ALL {
        let Some(flag) = setting.flag else {
            assert!(setting.secret, "{} has no flag", setting.name);
            continue;
        };
        let entry = entries
            .iter()
            .find(|e| e.split_whitespace().next() == Some(flag))
            .unwrap_or_else(|| panic!("--help has no flag {flag}"));
        // The table's help, values and default, whitespace collapsed
        // as in `entries`.
        let help = setting
            .help()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let help = help.replacen(setting.doc, "", 1);
        assert!(
            entry.contains(help.trim()),
            "--help of {flag} lacks {help:?}: {entry}"
        );
        let doc = setting.doc.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            entry.contains(&doc),
            "--help of {flag} lacks {doc:?}: {entry}"
        );
        let var = setting.env.expect("every flag has a variable");
        assert!(
            entry.contains(&format!("[env: {var}]")),
            "--help of {flag} lacks [env: {var}]: {entry}"
        );
    }
    // Every flag of serve is a setting of the table.
    for entry in &entries {
        let flag = entry.split_whitespace().next().unwrap_or_default();
        let flag = flag.split(['[', '=', ',']).next().unwrap_or_default();
        if flag.starts_with("--") && flag != "--help" {
            let backends = crate::backends::ALL.iter().flat_map(|b| b.settings());
            assert!(
                names::ALL
                    .iter()
                    .chain(backends)
                    .any(|s| s.flag == Some(flag)),
                "{flag} is not in a settings table"
            );
        }
    }
    // clap reads no variable: the environment is one layer, read by
    // `RawSettings::from_env`. And nothing takes the token.
    let cmd = ServeArgs::augment_args(clap::Command::new("serve"));
    assert!(
        cmd.get_arguments().all(|a| {
            a.get_env().is_none() && a.get_long().is_none_or(|l| !l.contains("token"))
        })
    );
    for var in [settings::TOKEN_ENV, orchestrator::GIT_TOKEN_ENV] {
        let shown = format!("[env: {var}]");
        assert!(entries.iter().all(|e| !e.contains(&shown)), "{shown}");
    }
}

#[test]
fn help_lists_environment_variables_examples_and_the_token_source() {
    let mut cmd = Cli::command();
    let help = cmd
        .find_subcommand_mut("serve")
        .expect("serve")
        .render_long_help()
        .to_string();
    for needle in [
        "--max-concurrent",
        "MAX_CONCURRENT_SESSIONS",
        "SANDBOX_CPUS",
        "Examples:",
        "garrison serve --outpost op-a",
        "DEVIN_OUTPOSTS_TOKEN",
        "credentials.json",
        "TENSORLAKE_API_KEY",
        "SANDBOX_TIMEOUT_SECS",
    ] {
        assert!(help.contains(needle), "--help lacks {needle:?}:\n{help}");
    }
}

#[test]
fn flags_are_parsed_as_given() {
    let args = parse(&[
        "--outpost",
        "a,b",
        "--outpost",
        "c",
        "--cpus",
        "4",
        "--drain",
        "--log-format",
        "json",
        "--listen",
        "0.0.0.0:9999",
    ]);
    assert_eq!(args.outposts, ["a,b", "c"]);
    assert_eq!(args.cpus.as_deref(), Some("4"));
    assert!(args.drain);
    assert_eq!(args.log_format.as_deref(), Some("json"));
    assert_eq!(args.listen.as_deref(), Some("0.0.0.0:9999"));
}

#[test]
fn log_format_and_listen_come_from_any_layer_and_have_defaults() {
    use orchestrator::settings::{LogFormat, resolve_process};
    let none = resolve_process(&parse(&[]).to_raw(&host(&[]))).expect("defaults");
    assert_eq!(none.log_format, LogFormat::Text);
    assert_eq!(none.listen, "127.0.0.1:9180".parse().expect("addr"));

    let h = host(&[
        ("GARRISON_LOG_FORMAT", "json"),
        ("GARRISON_LISTEN", "127.0.0.1:1"),
    ]);
    let env = resolve_process(&parse(&[]).to_raw(&h)).expect("env");
    assert_eq!(env.log_format, LogFormat::Json);
    assert_eq!(env.listen, "127.0.0.1:1".parse().expect("addr"));

    let flags = parse(&["--log-format", "text", "--listen", "[::1]:2"]);
    let both = resolve_process(&flags.to_raw(&h)).expect("flags");
    assert_eq!(both.log_format, LogFormat::Text);
    assert_eq!(both.listen, "[::1]:2".parse().expect("addr"));

    let bad = resolve_process(&parse(&["--listen", "nowhere"]).to_raw(&h)).unwrap_err();
    assert!(
        bad.to_string().starts_with("invalid --listen: \"nowhere\""),
        "{bad}"
    );
    let bad =
        resolve_process(&parse(&[]).to_raw(&host(&[("GARRISON_LOG_FORMAT", "xml")]))).unwrap_err();
    assert_eq!(
        bad.to_string(),
        "invalid GARRISON_LOG_FORMAT (environment): \"xml\" is not text or json"
    );
}

#[test]
fn a_backends_list_flag_may_be_repeated_and_is_refused_where_its_backend_is_unused() {
    let args = parse(&[
        "--device",
        "example.com/a=1",
        "--device",
        "example.com/b=2,example.com/c=3",
    ]);
    assert_eq!(
        args.backend_flags.0["devices"],
        "example.com/a=1,example.com/b=2,example.com/c=3"
    );
    let vars = [
        ("DEVIN_OUTPOSTS_TOKEN", "cog_x"),
        ("OUTPOST_ID", "op"),
        ("HOME", "/nonexistent"),
    ];
    let raw = parse(&["--backend", "host", "--device", "example.com/a=1"]).to_raw(&host(&vars));
    let error =
        settings::resolve(raw, None, &host(&vars), &crate::backends::ALL).expect_err("refused");
    assert_eq!(
        error.to_string(),
        "invalid --device: devices is a setting of the local backend, and no outpost uses it \
         (backend host)"
    );
}

#[test]
fn backends_settings_have_flags_that_beat_their_variables() {
    let args = parse(&["--runtime", "runsc", "--desktop", "--userns=false"]);
    assert_eq!(args.backend_flags.0["runtime"], "runsc");
    assert_eq!(args.backend_flags.0["desktop"], "true");
    assert_eq!(args.backend_flags.0["userns"], "false");
    let with_var = host(&[("SANDBOX_RUNTIME", "runc")]);
    let raw = args.to_raw(&with_var);
    let source =
        settings::BackendSource::new(&with_var, &raw.backend_keys).with_flags(&raw.backend_flags);
    use common::settings::SettingsSource;
    let runtime = source.get("SANDBOX_RUNTIME", "runtime").expect("set");
    assert_eq!(runtime.value, "runsc");
    assert_eq!(runtime.origin, Origin::Flag("--runtime"));
    // A bad value is the backend's to refuse, naming the flag.
    let raw = parse(&["--runtime", "docker"]).to_raw(&host(&[
        ("DEVIN_OUTPOSTS_TOKEN", "cog_x"),
        ("OUTPOST_ID", "op"),
        ("HOME", "/nonexistent"),
    ]));
    let error = settings::resolve(
        raw,
        None,
        &host(&[("HOME", "/nonexistent")]),
        &crate::backends::ALL,
    )
    .expect_err("refused");
    assert!(
        error.to_string().starts_with("invalid --runtime: "),
        "{error}"
    );
    // Modal's too, above its variables.
    let args = parse(&[
        "--modal-image",
        "im-flag",
        "--modal-sandbox-timeout-secs",
        "-1",
    ]);
    let with_var = host(&[
        ("MODAL_IMAGE", "im-env"),
        ("MODAL_TOKEN_ID", "ak-1"),
        ("MODAL_TOKEN_SECRET", "as-1"),
    ]);
    let raw = args.to_raw(&with_var);
    let source =
        settings::BackendSource::new(&with_var, &raw.backend_keys).with_flags(&raw.backend_flags);
    let image = source.get("MODAL_IMAGE", "modal_image").expect("set");
    assert_eq!(image.value, "im-flag");
    assert_eq!(image.origin, Origin::Flag("--modal-image"));
    let error = crate::backends::find("modal")
        .expect("registered")
        .configure(&source)
        .expect_err("refused");
    assert!(
        error.to_string().contains("--modal-sandbox-timeout-secs"),
        "{error}"
    );
    // Secrets never get one.
    assert!(Cli::try_parse_from(["garrison", "serve", "--tensorlake-api-key", "x"]).is_err());
    assert!(Cli::try_parse_from(["garrison", "serve", "--modal-token-secret", "x"]).is_err());
}

#[test]
fn negative_numbers_reach_validation() {
    let args = parse(&["--max-concurrent", "-1", "--cpus", "-2"]);
    assert_eq!(args.max_concurrent.as_deref(), Some("-1"));
    assert_eq!(args.cpus.as_deref(), Some("-2"));
}

#[test]
fn values_are_attributed_to_the_flag_or_the_variable() {
    // SANDBOX_CPUS and OUTPOST_ID are set, --cpus and --outpost absent.
    let args = parse(&["--memory-mb", "4096"]);
    let h = host(&[("SANDBOX_CPUS", "abc"), ("OUTPOST_ID", "op")]);
    let flags = args.flag_layer();
    assert_eq!(flags.cpus, None);
    assert_eq!(flags.outposts, None);
    assert_eq!(
        flags.memory_mb,
        Some(Sourced::new("4096".to_owned(), Origin::Flag("--memory-mb")))
    );
    let raw = args.to_raw(&h);
    assert_eq!(
        raw.cpus.map(|c| c.origin),
        Some(Origin::Env("SANDBOX_CPUS"))
    );
    assert_eq!(
        raw.outposts.map(|c| c.origin),
        Some(Origin::Env("OUTPOST_ID"))
    );
}

#[test]
fn a_flag_beats_its_variable() {
    let args = parse(&["--cpus", "4", "--state-dir", "/flag"]);
    let h = host(&[("SANDBOX_CPUS", "3"), ("GARRISON_HOME", "/env")]);
    let raw = args.to_raw(&h);
    assert_eq!(
        raw.cpus,
        Some(Sourced::new("4".to_owned(), Origin::Flag("--cpus")))
    );
    assert_eq!(
        raw.state_dir,
        Some(Sourced::new(
            PathBuf::from("/flag"),
            Origin::Flag("--state-dir")
        ))
    );
}

#[test]
fn a_flag_equal_to_its_variable_is_still_the_flag() {
    let args = parse(&["--cpus", "3", "--outpost", "op"]);
    let h = host(&[("SANDBOX_CPUS", "3"), ("OUTPOST_ID", "op")]);
    let raw = args.to_raw(&h);
    assert_eq!(raw.cpus.map(|c| c.origin), Some(Origin::Flag("--cpus")));
    assert_eq!(
        raw.outposts.map(|o| o.origin),
        Some(Origin::Flag("--outpost"))
    );
}

#[test]
fn the_configuration_file_is_named_by_the_flag_else_the_variable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("missing.toml");
    let missing = missing.to_str().expect("utf-8");
    let h = host(&[
        ("GARRISON_CONFIG_FILE", missing),
        ("GARRISON_CONFIG", dir.path().to_str().expect("utf-8")),
    ]);
    let from_env = file_layer(None, &h).expect_err("missing");
    assert_eq!(
        from_env.to_string(),
        format!("invalid GARRISON_CONFIG_FILE (environment): {missing} does not exist")
    );
    let from_flag = file_layer(Some(Path::new(missing)), &h).expect_err("missing");
    assert_eq!(
        from_flag.to_string(),
        format!("invalid --config: {missing} does not exist")
    );
    // Neither: the default file, absent here, is no error.
    let h = host(&[("GARRISON_CONFIG", dir.path().to_str().expect("utf-8"))]);
    assert!(file_layer(None, &h).is_ok());
}

#[test]
fn the_token_is_taken_from_the_environment_only() {
    let h = host(&[(settings::TOKEN_ENV, "cog_x")]);
    let raw = parse(&[]).to_raw(&h);
    assert_eq!(
        raw.token.map(|t| t.origin),
        Some(Origin::Env(settings::TOKEN_ENV))
    );
    assert!(Cli::try_parse_from(["garrison", "serve", "--token", "cog_x"]).is_err());
}
