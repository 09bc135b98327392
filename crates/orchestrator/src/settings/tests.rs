use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use common::settings::SettingsSource;
use fleet::{Platform, Secret};
use sandbox::plugin::{BackendPlugin, ConfiguredBackend, Placement};
use sandbox::{Resources, Sandbox};

use super::names::{self, Kind};
use super::validate::parse_retention;
use super::*;
use crate::planner::Policy;

/// A backend that only records what it read. The orchestrator never names
/// a real backend; these stand in for the registry's four.
struct Fake {
    name: &'static str,
    /// Declared keys of the file, like Tensorlake's.
    file_keys: &'static [&'static str],
    /// A variable without which it is "not configured".
    required_var: Option<&'static str>,
    /// Its declared settings.
    settings: &'static [Setting],
}

#[derive(Debug)]
struct FakeConfigured {
    /// `(setting, value, origin)` for each file key and the required variable.
    #[expect(dead_code, reason = "the tests read it through `Debug`")]
    seen: Vec<(String, String, String)>,
}

impl BackendPlugin for Fake {
    fn name(&self) -> &'static str {
        self.name
    }
    fn summary(&self) -> &'static str {
        "a fake"
    }
    fn file_keys(&self) -> &'static [&'static str] {
        self.file_keys
    }
    fn settings(&self) -> &'static [Setting] {
        self.settings
    }
    fn refused_file_keys(&self) -> &'static [(&'static str, &'static str)] {
        if self.file_keys.is_empty() {
            &[]
        } else {
            &[(
                "fake_api_key",
                "the key is read from FAKE_API_KEY, never from this file",
            )]
        }
    }
    fn configure(
        &self,
        settings: &dyn SettingsSource,
    ) -> Result<Arc<dyn ConfiguredBackend>, SettingsError> {
        let mut seen = Vec::new();
        if let Some(var) = self.required_var {
            let value = settings.var(var).ok_or_else(|| {
                SettingsError::Missing(format!("the {} backend needs {var}", self.name))
            })?;
            seen.push((var.to_owned(), value.value, value.origin.to_string()));
        }
        for key in self.file_keys {
            if let Some(value) = settings.file_key(key) {
                seen.push(((*key).to_owned(), value.value, value.origin.to_string()));
            }
        }
        Ok(Arc::new(FakeConfigured { seen }))
    }
}

impl ConfiguredBackend for FakeConfigured {
    fn build(&self, _: &Placement) -> anyhow::Result<Arc<dyn Sandbox>> {
        anyhow::bail!("a fake builds nothing")
    }
}

const FAKE_KEY_VAR: &str = "FAKE_API_KEY";

/// A setting only the fake Tensorlake can honour.
const FAKE_GPUS: Setting = Setting::new(
    "fake_gpus",
    "--fake-gpus",
    "FAKE_GPUS",
    Kind::List,
    "GPUs to hand to sandboxes",
)
.backend_only();

static BACKENDS: [&dyn BackendPlugin; 4] = [
    &Fake {
        name: "host",
        file_keys: &[],
        required_var: None,
        settings: &[],
    },
    &Fake {
        name: "local",
        file_keys: &[],
        required_var: None,
        settings: &[],
    },
    &Fake {
        name: "tensorlake",
        file_keys: &["fake_image", "fake_timeout_secs", "fake_gpus"],
        required_var: Some(FAKE_KEY_VAR),
        settings: &[FAKE_GPUS],
    },
    &Fake {
        name: "modal",
        file_keys: &[],
        required_var: None,
        settings: &[],
    },
];

/// What the configured backend `name` read: its `Debug`, which lists
/// `(setting, value, origin)` for each value.
fn seen_by(config: &ServeConfig, name: &str) -> String {
    format!("{:?}", config.backends.get(name).expect("configured"))
}

/// One entry of [`seen_by`].
fn saw(setting: &str, value: &str, origin: &str) -> String {
    format!("{:?}", (setting, value, origin))
}

const TOKEN: &str = "cog_test_token_do_not_print_0123456789";
const FILE: &str = "/etc/garrison/garrison.toml";

fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// An ordinary user with a home directory and a Modal token in the
/// environment, which tests of outposts on Modal need and none is about.
fn host() -> HostEnv {
    HostEnv::new(
        1000,
        vars(&[
            ("HOME", "/home/ada"),
            ("MODAL_TOKEN_ID", "ak-host"),
            ("MODAL_TOKEN_SECRET", "as-host"),
            (FAKE_KEY_VAR, TL_KEY),
        ]),
    )
}

/// The environment layer for these variables plus a token, an outpost and
/// a Tensorlake key, which nearly every test needs and none is about.
fn env(pairs: &[(&str, &str)]) -> RawSettings {
    let mut all = vars(&[(TOKEN_ENV, TOKEN), ("OUTPOST_ID", "op-1")]);
    all.extend(vars(pairs));
    RawSettings::from_env(&HostEnv::new(1000, all))
}

/// The environment layer for exactly these variables.
fn bare_env(pairs: &[(&str, &str)]) -> RawSettings {
    RawSettings::from_env(&HostEnv::new(1000, vars(pairs)))
}

fn file(text: &str) -> RawSettings {
    parse_file(Path::new(FILE), text, &BACKENDS).expect("the test file parses")
}

fn file_err(text: &str) -> String {
    parse_file(Path::new(FILE), text, &BACKENDS)
        .expect_err("the test file is refused")
        .to_string()
}

/// The flag layer as `garrison serve` builds it: one flag set.
fn flag(names: Setting, value: &str) -> RawSettings {
    let flag_name = names.flag.expect("a flag");
    let text = Some(Sourced::new(value.to_owned(), Origin::Flag(flag_name)));
    let path = Some(Sourced::new(PathBuf::from(value), Origin::Flag(flag_name)));
    let mut raw = RawSettings::default();
    match names.name {
        "outpost" => {
            raw.outposts = Some(Sourced::new(
                vec![value.to_owned()],
                Origin::Flag(flag_name),
            ))
        }
        "api_url" => raw.api_url = text,
        "acceptor_id" => raw.acceptor_id = text,
        "static_base_url" => raw.static_base_url = text,
        "backend" => raw.backend = text,
        "max_concurrent" => raw.max_concurrent = text,
        "state_dir" => raw.state_dir = path,
        "snapshot_dir" => raw.snapshot_dir = path,
        "snapshot_retention" => raw.snapshot_retention = text,
        "snapshot_store" => raw.snapshot_store = text,
        "snapshot_key_file" => raw.snapshot_key_file = path,
        "snapshot_integrity_fallback" => raw.snapshot_integrity_fallback = text,
        "relist_interval_secs" => raw.relist_interval_secs = text,
        "cpus" => raw.cpus = text,
        "memory_mb" => raw.memory_mb = text,
        "disk_mb" => raw.disk_mb = text,
        "image" => raw.image = text,
        "max_restarts" => raw.max_restarts = text,
        "suspend_exit_grace_secs" => raw.suspend_exit_grace_secs = text,
        "gateway_url" => raw.gateway_url = text,
        "session_log_max_mb" => raw.session_log_max_mb = text,
        "state_dir_min_free_mb" => raw.state_dir_min_free_mb = text,
        "git_username" => raw.git_username = text,
        "drain" => raw.drain = text,
        "log_format" => raw.log_format = text,
        "listen" => raw.listen = text,
        "repos" => {
            raw.repos = Some(Sourced::new(
                vec![value.to_owned()],
                Origin::Flag(flag_name),
            ))
        }
        other => panic!("no flag layer field for {other}"),
    }
    raw
}

fn ok(raw: RawSettings) -> ServeConfig {
    resolve(raw, None, &host(), &BACKENDS).unwrap_or_else(|e| panic!("resolve failed: {e}"))
}

fn err(raw: RawSettings) -> String {
    let error = resolve(raw, None, &host(), &BACKENDS).expect_err("resolve must fail");
    let message = error.to_string();
    assert!(!message.contains(TOKEN), "token in error: {message}");
    assert!(
        !format!("{error:?}").contains(TOKEN),
        "token in error Debug: {error:?}"
    );
    message
}

fn creds(api_url: &str, outpost_id: Option<&str>, token: &str) -> Credentials {
    Credentials {
        api_url: api_url.to_owned(),
        outpost_id: outpost_id.map(str::to_owned),
        token: Secret::new(token),
    }
}

const CREDS_PATH: &str = "/home/ada/.config/garrison/credentials.json";

fn with_creds(raw: RawSettings, c: &Credentials) -> Result<ServeConfig, SettingsError> {
    resolve(raw, Some((Path::new(CREDS_PATH), c)), &host(), &BACKENDS)
}

// ---------------------------------------------------------------------------
// Defaults and precedence
// ---------------------------------------------------------------------------

#[test]
fn defaults_fill_everything_not_given() {
    let config = ok(env(&[]));
    assert_eq!(config.api_url, "https://api.devin.ai");
    assert_eq!(config.token.expose(), TOKEN);
    assert_eq!(config.acceptor_id, None);
    assert_eq!(config.static_base_url, DEFAULT_STATIC_BASE_URL);
    assert_eq!(
        config.state_dir,
        PathBuf::from("/home/ada/.local/share/garrison")
    );
    assert_eq!(
        config.snapshot_dir,
        PathBuf::from("/home/ada/.local/share/garrison/snapshots")
    );
    assert_eq!(
        config.snapshot_retention,
        Some(Duration::from_secs(30 * 24 * 3600))
    );
    assert_eq!(config.relist_interval, Duration::from_secs(30));
    assert!(!config.drain);
    assert_eq!(
        config.policy,
        Policy {
            max_restarts: 3,
            ..Policy::default()
        }
    );
    assert_eq!(
        config.outposts,
        vec![OutpostConfig {
            outpost_id: "op-1".into(),
            backend: "local",
            max_concurrent: 5,
            resources: Resources {
                cpus: 2.0,
                memory_mb: 8192,
                disk_mb: 10240
            },
            image: None,
            platform: Platform::Linux,
            repos: Repos::default(),
        }]
    );
}

/// One setting's values in each layer, and how to read it back.
struct Case {
    names: Setting,
    /// Flag, environment, file (as a TOML literal) values.
    flag: &'static str,
    env: &'static str,
    file: &'static str,
    /// The resolved value from each layer, then the default.
    expect: [&'static str; 4],
    get: fn(&ServeConfig) -> String,
}

fn first(c: &ServeConfig) -> &OutpostConfig {
    &c.outposts[0]
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            names: names::MAX_CONCURRENT,
            flag: "7",
            env: "6",
            file: "4",
            expect: ["7", "6", "4", "5"],
            get: |c| first(c).max_concurrent.to_string(),
        },
        Case {
            names: names::CPUS,
            flag: "4",
            env: "3",
            file: "1.5",
            expect: ["4", "3", "1.5", "2"],
            get: |c| first(c).resources.cpus.to_string(),
        },
        Case {
            names: names::MEMORY_MB,
            flag: "4096",
            env: "2048",
            file: "1024",
            expect: ["4096", "2048", "1024", "8192"],
            get: |c| first(c).resources.memory_mb.to_string(),
        },
        Case {
            names: names::DISK_MB,
            flag: "4096",
            env: "2048",
            file: "1024",
            expect: ["4096", "2048", "1024", "10240"],
            get: |c| first(c).resources.disk_mb.to_string(),
        },
        Case {
            names: names::BACKEND,
            flag: "modal",
            env: "tensorlake",
            file: "\"host\"",
            expect: ["modal", "tensorlake", "host", "local"],
            get: |c| first(c).backend.to_owned(),
        },
        Case {
            names: names::IMAGE,
            flag: "img-flag",
            env: "img-env",
            file: "\"img-file\"",
            expect: ["img-flag", "img-env", "img-file", ""],
            get: |c| first(c).image.clone().unwrap_or_default(),
        },
        Case {
            names: names::API_URL,
            flag: "http://flag.test/",
            env: "http://env.test",
            file: "\"https://file.test/api/\"",
            expect: [
                "http://flag.test",
                "http://env.test",
                "https://file.test/api",
                "https://api.devin.ai",
            ],
            get: |c| c.api_url.clone(),
        },
        Case {
            names: names::STATIC_BASE_URL,
            flag: "http://flag.test/r",
            env: "http://env.test/r/",
            file: "\"https://file.test\"",
            expect: [
                "http://flag.test/r/",
                "http://env.test/r/",
                "https://file.test/",
                DEFAULT_STATIC_BASE_URL,
            ],
            get: |c| c.static_base_url.clone(),
        },
        Case {
            names: names::ACCEPTOR_ID,
            flag: "acc-flag",
            env: "acc-env",
            file: "\"acc-file\"",
            expect: ["acc-flag", "acc-env", "acc-file", ""],
            get: |c| c.acceptor_id.clone().unwrap_or_default(),
        },
        Case {
            names: names::STATE_DIR,
            flag: "/flag",
            env: "/env",
            file: "\"/file\"",
            expect: ["/flag", "/env", "/file", "/home/ada/.local/share/garrison"],
            get: |c| c.state_dir.display().to_string(),
        },
        Case {
            names: names::SNAPSHOT_DIR,
            flag: "/flag",
            env: "/env",
            file: "\"/file\"",
            expect: [
                "/flag",
                "/env",
                "/file",
                "/home/ada/.local/share/garrison/snapshots",
            ],
            get: |c| c.snapshot_dir.display().to_string(),
        },
        Case {
            names: names::SNAPSHOT_STORE,
            flag: "s3://flag/p",
            env: "gs://env/p",
            file: "\"/file\"",
            expect: [
                "s3://flag/p",
                "gs://env/p",
                "/file",
                "/home/ada/.local/share/garrison/snapshots",
            ],
            get: |c| match &c.snapshot_store {
                Some(store) => store.url.to_string(),
                None => c.snapshot_dir.display().to_string(),
            },
        },
        Case {
            names: names::SNAPSHOT_INTEGRITY_FALLBACK,
            flag: "fresh",
            env: "fail",
            file: "\"fresh\"",
            expect: ["true", "false", "true", "false"],
            get: |c| c.policy.corrupt_snapshot_starts_fresh.to_string(),
        },
        Case {
            names: names::SNAPSHOT_RETENTION,
            flag: "90m",
            env: "12h",
            file: "\"unlimited\"",
            expect: ["Some(5400s)", "Some(43200s)", "None", "Some(2592000s)"],
            get: |c| format!("{:?}", c.snapshot_retention),
        },
        Case {
            names: names::RELIST_INTERVAL_SECS,
            flag: "7",
            env: "5",
            file: "4",
            expect: ["7s", "5s", "4s", "30s"],
            get: |c| format!("{:?}", c.relist_interval),
        },
        Case {
            names: names::MAX_RESTARTS,
            flag: "7",
            env: "5",
            file: "0",
            expect: ["7", "5", "0", "3"],
            get: |c| c.policy.max_restarts.to_string(),
        },
        Case {
            names: names::DRAIN,
            flag: "true",
            env: "true",
            file: "true",
            expect: ["true", "true", "true", "false"],
            get: |c| c.drain.to_string(),
        },
        Case {
            names: names::SESSION_LOG_MAX_MB,
            flag: "2",
            env: "1",
            file: "1024",
            expect: ["2097152", "1048576", "1073741824", "268435456"],
            get: |c| c.policy.session_log_max_bytes.to_string(),
        },
        Case {
            names: names::STATE_DIR_MIN_FREE_MB,
            flag: "0",
            env: "1",
            file: "1024",
            expect: ["0", "1048576", "1073741824", "67108864"],
            get: |c| c.state_dir_min_free_bytes.to_string(),
        },
    ]
}

#[test]
fn flags_beat_environment_beat_file_beat_defaults() {
    for case in cases() {
        let key = case.names.name;
        let flags = flag(case.names, case.flag);
        let environment = match case.names.env {
            Some(var) => env(&[(var, case.env)]),
            None => env(&[]),
        };
        let file = file(&format!("{key} = {}", case.file));
        let [from_flag, from_env, from_file, default] = case.expect;

        let all = flags.clone().or(environment.clone()).or(file.clone());
        assert_eq!((case.get)(&ok(all)), from_flag, "{key}: the flag wins");
        if case.names.env.is_some() {
            let no_flag = RawSettings::default().or(environment).or(file.clone());
            assert_eq!(
                (case.get)(&ok(no_flag)),
                from_env,
                "{key}: the environment beats the file"
            );
        }
        let file_only = RawSettings::default().or(env(&[])).or(file);
        assert_eq!(
            (case.get)(&ok(file_only)),
            from_file,
            "{key}: the file beats the default"
        );
        assert_eq!((case.get)(&ok(env(&[]))), default, "{key}: the default");
    }
}

#[test]
fn every_environment_variable_is_read() {
    for names in names::ALL {
        let Some(var) = names.env else { continue };
        if names.name == "config" {
            // The file's path is read by the caller, before any layer exists.
            continue;
        }
        let raw = bare_env(&[(var, "x")]);
        assert_ne!(raw, RawSettings::default(), "{var} is not read");
    }
}

#[test]
fn empty_environment_variables_count_as_unset() {
    let raw = bare_env(&[("OUTPOST_ID", ""), ("SANDBOX_CPUS", ""), (TOKEN_ENV, "")]);
    assert_eq!(raw, RawSettings::default());
}

#[test]
fn drain_is_off_unless_the_flag_is_given() {
    assert!(!ok(env(&[])).drain);
    let flags = RawSettings {
        drain: Some(Sourced::new("true".to_owned(), Origin::Flag("--drain"))),
        ..RawSettings::default()
    };
    assert!(ok(flags.or(env(&[]))).drain);
    assert!(ok(env(&[("GARRISON_DRAIN", "true")])).drain);
    assert!(ok(env(&[]).or(file("drain = true\n"))).drain);
    assert_eq!(
        err(env(&[("GARRISON_DRAIN", "yes")])),
        "invalid GARRISON_DRAIN (environment): \"yes\" is not true or false"
    );
}

#[test]
fn max_restarts_goes_into_the_policy_and_leaves_the_rest() {
    let config = ok(flag(names::MAX_RESTARTS, "0").or(env(&[])));
    assert_eq!(
        config.policy,
        Policy {
            max_restarts: 0,
            ..Policy::default()
        }
    );
}

// ---------------------------------------------------------------------------
// Token and credentials as defaults
// ---------------------------------------------------------------------------

#[test]
fn the_environment_token_beats_the_credentials_file() {
    let c = creds("https://api.devin.ai", None, "from-file");
    let config = with_creds(env(&[]), &c).expect("resolves");
    assert_eq!(config.token.expose(), TOKEN);
}

#[test]
fn the_credentials_file_supplies_token_api_url_and_outpost() {
    let c = creds("https://api.example.test/", Some("op-saved"), "from-file");
    let config = with_creds(RawSettings::default(), &c).expect("resolves");
    assert_eq!(config.token.expose(), "from-file");
    assert_eq!(config.api_url, "https://api.example.test");
    assert_eq!(config.outposts.len(), 1);
    assert_eq!(config.outposts[0].outpost_id, "op-saved");
}

#[test]
fn any_layer_beats_the_credentials_file_for_api_url_and_outpost() {
    let c = creds("https://saved.test", Some("op-saved"), "from-file");
    let raw = bare_env(&[
        ("DEVIN_API_URL", "https://env.test"),
        ("OUTPOST_ID", "op-env"),
    ]);
    let config = with_creds(raw, &c).expect("resolves");
    assert_eq!(config.api_url, "https://env.test");
    assert_eq!(config.outposts[0].outpost_id, "op-env");

    let tables = file("[[outpost]]\nid = \"op-table\"");
    let config = with_creds(tables, &c).expect("resolves");
    assert_eq!(config.outposts[0].outpost_id, "op-table");
}

#[test]
fn an_empty_environment_token_falls_back_to_the_credentials_file() {
    let c = creds("https://api.devin.ai", Some("op"), "from-file");
    let raw = bare_env(&[(TOKEN_ENV, "")]);
    assert_eq!(
        with_creds(raw, &c).expect("resolves").token.expose(),
        "from-file"
    );
}

#[test]
fn no_token_anywhere_is_an_error_naming_both_ways_to_give_one() {
    assert_eq!(
        err(bare_env(&[("OUTPOST_ID", "op")])),
        "no Devin token: set DEVIN_OUTPOSTS_TOKEN or run `garrison connect`"
    );
    let c = creds("https://api.devin.ai", Some("op"), "");
    let e = with_creds(RawSettings::default(), &c).expect_err("empty token");
    assert!(matches!(e, SettingsError::NoToken), "{e}");
}

#[test]
fn a_token_with_whitespace_is_refused_without_being_shown() {
    let raw = bare_env(&[(TOKEN_ENV, "cog_abc\n"), ("OUTPOST_ID", "op")]);
    let message = err(raw);
    assert_eq!(
        message,
        "invalid DEVIN_OUTPOSTS_TOKEN (environment): contains whitespace or control characters (value not shown)"
    );
    assert!(!message.contains("cog_abc"));

    let c = creds("https://api.devin.ai", Some("op"), "cog abc");
    let message = with_creds(RawSettings::default(), &c)
        .expect_err("refused")
        .to_string();
    assert_eq!(
        message,
        format!(
            "invalid token in {CREDS_PATH}: contains whitespace or control characters (value not shown)"
        )
    );
}

#[test]
fn a_bad_api_url_in_the_credentials_file_names_the_file() {
    let c = creds("ftp://x", Some("op"), "t");
    let message = with_creds(RawSettings::default(), &c)
        .expect_err("refused")
        .to_string();
    assert_eq!(
        message,
        format!("invalid api_url in {CREDS_PATH}: \"ftp://x\" must be an http:// or https:// URL")
    );
}

// ---------------------------------------------------------------------------
// Outposts
// ---------------------------------------------------------------------------

fn ids(config: &ServeConfig) -> Vec<&str> {
    config
        .outposts
        .iter()
        .map(|o| o.outpost_id.as_str())
        .collect()
}

#[test]
fn outposts_may_be_repeated_and_comma_separated() {
    let flags = RawSettings {
        outposts: Some(Sourced::new(
            vec!["a,b".into(), "c".into()],
            Origin::Flag("--outpost"),
        )),
        ..RawSettings::default()
    };
    assert_eq!(ids(&ok(flags.or(env(&[])))), ["a", "b", "c"]);

    let raw = bare_env(&[(TOKEN_ENV, TOKEN), ("OUTPOST_ID", "a, b,")]);
    assert_eq!(ids(&ok(raw)), ["a", "b"]);
}

#[test]
fn outposts_from_flags_beat_the_environment() {
    let config = ok(flag(names::OUTPOST, "op-flag").or(env(&[("OUTPOST_ID", "op-env")])));
    assert_eq!(ids(&config), ["op-flag"]);
}

#[test]
fn outpost_tables_fall_back_to_the_merged_top_level_values() {
    let text = r#"
        cpus = 3
        image = "file-image"

        [[outpost]]
        id = "small"

        [[outpost]]
        id = "big"
        backend = "modal"
        max_concurrent = 2
        cpus = 16
        memory_mb = 65536
        disk_mb = 100000
        image = "big-image"
        platform = "windows"
    "#;
    // The top-level values come from three layers: flag, environment, file.
    let raw = flag(names::MEMORY_MB, "4096")
        .or(bare_env(&[
            (TOKEN_ENV, TOKEN),
            ("MAX_CONCURRENT_SESSIONS", "9"),
        ]))
        .or(file(text));
    let config = ok(raw);
    assert_eq!(
        config.outposts,
        vec![
            OutpostConfig {
                outpost_id: "small".into(),
                backend: "local",
                max_concurrent: 9,
                resources: Resources {
                    cpus: 3.0,
                    memory_mb: 4096,
                    disk_mb: 10240
                },
                image: Some("file-image".into()),
                platform: Platform::Linux,
                repos: Repos::default(),
            },
            OutpostConfig {
                outpost_id: "big".into(),
                backend: "modal",
                max_concurrent: 2,
                resources: Resources {
                    cpus: 16.0,
                    memory_mb: 65536,
                    disk_mb: 100000
                },
                image: Some("big-image".into()),
                platform: Platform::Windows,
                repos: Repos::default(),
            },
        ]
    );
}

#[test]
fn listed_outposts_take_their_tables_overrides_and_only_listed_ones_are_served() {
    let text = r#"
        [[outpost]]
        id = "a"
        cpus = 8

        [[outpost]]
        id = "unlisted"
    "#;
    let raw = flag(names::OUTPOST, "b,a")
        .or(flag(names::CPUS, "1"))
        .or(env(&[]))
        .or(file(text));
    let config = ok(raw);
    assert_eq!(ids(&config), ["b", "a"]);
    assert_eq!(
        config.outposts[0].resources.cpus, 1.0,
        "b has no table: the flag"
    );
    assert_eq!(
        config.outposts[1].resources.cpus, 8.0,
        "a's table beats the flag"
    );
}

#[test]
fn no_outpost_anywhere_is_an_error_listing_the_ways_to_give_one() {
    assert_eq!(
        err(bare_env(&[(TOKEN_ENV, TOKEN)])),
        "no outpost to serve: pass --outpost, set OUTPOST_ID, add an [[outpost]] table, or run `garrison connect`"
    );
    let c = creds("https://api.devin.ai", None, "t");
    let e = with_creds(RawSettings::default(), &c).expect_err("no outpost");
    assert!(matches!(e, SettingsError::NoOutpost), "{e}");
}

#[test]
fn duplicate_outpost_ids_are_errors() {
    assert_eq!(
        err(flag(names::OUTPOST, "a,b,a").or(env(&[]))),
        "invalid --outpost: outpost \"a\" is listed twice"
    );
    assert_eq!(
        err(bare_env(&[(TOKEN_ENV, TOKEN), ("OUTPOST_ID", "a,a")])),
        "invalid OUTPOST_ID (environment): outpost \"a\" is listed twice"
    );
    let text = "[[outpost]]\nid = \"a\"\n[[outpost]]\nid = \"a\"\n";
    assert_eq!(
        err(bare_env(&[(TOKEN_ENV, TOKEN)]).or(file(text))),
        format!(
            "invalid id of [[outpost]] \"a\" in {FILE}: outpost \"a\" has two [[outpost]] tables"
        )
    );
    // Also when --outpost chooses among the tables.
    assert!(
        err(flag(names::OUTPOST, "a").or(env(&[])).or(file(text)))
            .contains("two [[outpost]] tables")
    );
}

#[test]
fn outpost_lists_without_ids_are_errors() {
    assert_eq!(
        err(flag(names::OUTPOST, " , ").or(env(&[]))),
        "invalid --outpost: no outpost id given"
    );
    assert_eq!(
        err(flag(names::OUTPOST, "a b").or(env(&[]))),
        "invalid --outpost: outpost id \"a b\" contains whitespace, a control character or a comma"
    );
    assert_eq!(
        err(bare_env(&[(TOKEN_ENV, TOKEN)]).or(file("[[outpost]]\nid = \"\""))),
        format!("invalid id of [[outpost]] \"\" in {FILE}: the outpost id is empty")
    );
}

// ---------------------------------------------------------------------------
// The file
// ---------------------------------------------------------------------------

#[test]
fn unknown_keys_are_errors_naming_the_key() {
    let message = file_err("max_concurent = 3");
    assert!(
        message.starts_with(&format!(
            "invalid {FILE}: line 1, column 1: unknown key `max_concurent`"
        )),
        "{message}"
    );

    let message = file_err("[[outpost]]\nid = \"a\"\ncpu = 3\n");
    assert!(
        message.starts_with(&format!(
            "invalid {FILE}: line 3, column 1: unknown key `cpu`"
        )),
        "{message}"
    );

    let message = file_err("[outposts]\n");
    assert!(message.contains("unknown key `outposts`"), "{message}");
}

#[test]
fn the_list_of_valid_keys_is_the_settings_tables() {
    let message = file_err("max_concurent = 3");
    let (_, listed) = message.split_once("; valid keys are ").expect("a list");
    let listed: Vec<&str> = listed.split(", ").collect();
    let mut expected: Vec<&str> = names::file_keys().collect();
    // The backends' keys are accepted too, so they are listed.
    expected.extend(BACKENDS.iter().flat_map(|b| b.file_keys()).copied());
    expected.push("[[outpost]]");
    assert_eq!(listed, expected);
    for key in [
        "log_format",
        "drain",
        "listen",
        "session_log_max_mb",
        "fake_image",
    ] {
        assert!(listed.contains(&key), "{key} missing from {message}");
        // And each one listed is accepted.
    }
    let message = file_err("[[outpost]]\nid = \"a\"\ncpu = 3\n");
    let (_, listed) = message.split_once("; valid keys are ").expect("a list");
    assert_eq!(
        listed.split(", ").collect::<Vec<_>>(),
        names::outpost_keys().collect::<Vec<_>>()
    );
}

#[test]
fn every_key_of_the_table_is_accepted_by_the_file() {
    // A value of the right type for each key: the file's serde types and
    // the table must agree.
    let mut text = String::new();
    for setting in names::ALL.iter().filter(|s| s.in_file) {
        let value = match setting.kind {
            Kind::Int { min, .. } => min.to_string(),
            Kind::Float { max, .. } => max.to_string(),
            Kind::Bool => "true".to_owned(),
            Kind::List => "[]".to_owned(),
            Kind::Choice(words) => format!("{:?}", words[0]),
            _ => "\"x\"".to_owned(),
        };
        text.push_str(&format!("{} = {value}\n", setting.name));
    }
    text.push_str("[[outpost]]\nid = \"a\"\nplatform = \"linux\"\n");
    for setting in names::ALL.iter().filter(|s| s.per_outpost) {
        let value = match setting.kind {
            Kind::Int { min, .. } => min.to_string(),
            Kind::Float { max, .. } => max.to_string(),
            Kind::List => "[]".to_owned(),
            _ => "\"x\"".to_owned(),
        };
        text.push_str(&format!("{} = {value}\n", setting.name));
    }
    file(&text);
}

#[test]
fn ranges_are_the_tables() {
    // Each number's bounds are accepted, one past them refused, naming
    // the setting; negative numbers too.
    for setting in names::ALL {
        let Kind::Int { min, max } = setting.kind else {
            continue;
        };
        let at = |n: i64| {
            let raw = flag(*setting, &n.to_string()).or(env(&[]));
            resolve(raw, None, &host(), &BACKENDS)
        };
        assert!(at(min).is_ok(), "{} refuses {min}", setting.name);
        assert!(at(max).is_ok(), "{} refuses {max}", setting.name);
        let below = at(min - 1).expect_err("below the range");
        assert!(
            below
                .to_string()
                .starts_with(&format!("invalid {}: ", setting.flag.unwrap())),
            "{below}"
        );
        if max < i64::MAX {
            assert!(at(max + 1).is_err(), "{} takes {}", setting.name, max + 1);
        }
    }
    let negative = err(env(&[]).or(file("max_concurrent = -1\n")));
    assert_eq!(
        negative,
        format!("invalid max_concurrent in {FILE}: -1 is out of range 1..=10000")
    );
}

#[test]
fn a_token_in_the_file_is_refused_without_being_shown() {
    let message = file_err(&format!("token = \"{TOKEN}\"\n"));
    assert!(!message.contains(TOKEN), "{message}");
    assert!(message.contains("unknown key `token`"), "{message}");
    assert!(message.contains("never from this file"), "{message}");
}

#[test]
fn wrong_types_in_the_file_are_errors_with_a_position() {
    let message = file_err("cpus = 2\nmax_concurrent = \"five\"\n");
    assert!(
        message.starts_with(&format!("invalid {FILE}: line 2, column 18:")),
        "{message}"
    );
    assert!(file_err("[[outpost]]\ncpus = 2\n").contains("missing field `id`"));
    assert!(file_err("cpus = ").starts_with(&format!("invalid {FILE}: line 1")));
}

#[test]
fn an_empty_file_is_an_empty_layer() {
    assert_eq!(file(""), RawSettings::default());
}

#[test]
fn load_file_reads_and_tolerates_a_missing_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("garrison.toml");
    assert_eq!(load_file(&path, &BACKENDS).expect("missing is fine"), None);
    fs::write(&path, "max_concurrent = 2\n").expect("write");
    let raw = load_file(&path, &BACKENDS).expect("reads").expect("exists");
    assert_eq!(
        raw.max_concurrent,
        Some(Sourced::new(
            "2".to_owned(),
            Origin::file(&path, "max_concurrent", None)
        ))
    );
}

// ---------------------------------------------------------------------------
// Validation: every message names the setting and its origin
// ---------------------------------------------------------------------------

fn file_with_outpost(text: &str) -> RawSettings {
    bare_env(&[(TOKEN_ENV, TOKEN)]).or(file(text))
}

#[test]
fn validation_errors_name_the_setting_and_its_origin() {
    let cases: Vec<(RawSettings, String)> = vec![
        (
            env(&[("SANDBOX_CPUS", "abc")]),
            "invalid SANDBOX_CPUS (environment): \"abc\" is not a number".into(),
        ),
        (
            flag(names::CPUS, "0").or(env(&[])),
            "invalid --cpus: 0 is out of range: more than 0 and at most 256".into(),
        ),
        (
            flag(names::CPUS, "257").or(env(&[])),
            "invalid --cpus: 257 is out of range: more than 0 and at most 256".into(),
        ),
        (
            flag(names::CPUS, "NaN").or(env(&[])),
            "invalid --cpus: NaN is out of range: more than 0 and at most 256".into(),
        ),
        (
            env(&[]).or(file("max_concurrent = 0")),
            format!("invalid max_concurrent in {FILE}: 0 is out of range 1..=10000"),
        ),
        (
            env(&[("MAX_CONCURRENT_SESSIONS", "10001")]),
            "invalid MAX_CONCURRENT_SESSIONS (environment): 10001 is out of range 1..=10000".into(),
        ),
        (
            flag(names::MAX_CONCURRENT, "2.5").or(env(&[])),
            "invalid --max-concurrent: \"2.5\" is not a whole number".into(),
        ),
        (
            flag(names::MAX_CONCURRENT, "99999999999999999999").or(env(&[])),
            "invalid --max-concurrent: 99999999999999999999 is out of range 1..=10000".into(),
        ),
        (
            env(&[("SANDBOX_MEMORY_MB", "64")]),
            "invalid SANDBOX_MEMORY_MB (environment): 64 is out of range (the minimum is 128)".into(),
        ),
        (
            env(&[("SANDBOX_DISK_MB", "-1")]),
            "invalid SANDBOX_DISK_MB (environment): -1 is out of range (the minimum is 256)".into(),
        ),
        (
            flag(names::RELIST_INTERVAL_SECS, "0").or(env(&[])),
            "invalid --relist-interval-secs: 0 is out of range 1..=3600".into(),
        ),
        (
            env(&[]).or(file("relist_interval_secs = 3601")),
            format!("invalid relist_interval_secs in {FILE}: 3601 is out of range 1..=3600"),
        ),
        (
            flag(names::MAX_RESTARTS, "101").or(env(&[])),
            "invalid --max-restarts: 101 is out of range 0..=100".into(),
        ),
        (
            flag(names::API_URL, "ftp://api.devin.ai").or(env(&[])),
            "invalid --api-url: \"ftp://api.devin.ai\" must be an http:// or https:// URL".into(),
        ),
        (
            flag(names::API_URL, "api.devin.ai").or(env(&[])),
            "invalid --api-url: \"api.devin.ai\" is not a URL: relative URL without a base".into(),
        ),
        (
            env(&[("DEVIN_API_URL", "https://api.devin.ai/?x=1")]),
            "invalid DEVIN_API_URL (environment): \"https://api.devin.ai/?x=1\" must not have a query (?...)".into(),
        ),
        (
            flag(names::API_URL, "https://api.devin.ai/opbeta/").or(env(&[])),
            "invalid --api-url: \"https://api.devin.ai/opbeta/\" ends in /opbeta: give the API base without it, e.g. https://api.devin.ai".into(),
        ),
        (
            flag(names::API_URL, "https://me:hunter2@api.devin.ai").or(env(&[])),
            "invalid --api-url: the URL must not contain a user name or password".into(),
        ),
        (
            env(&[("DEVIN_WORKER_STATIC_BASE_URL", "file:///srv/remote")]),
            "invalid DEVIN_WORKER_STATIC_BASE_URL (environment): \"file:///srv/remote\" must be an http:// or https:// URL".into(),
        ),
        (
            flag(names::ACCEPTOR_ID, "host/1").or(env(&[])),
            "invalid --acceptor-id: \"host/1\" contains '/': only letters, digits, '.', '_' and '-' are allowed".into(),
        ),
        (
            env(&[]).or(file(&format!("acceptor_id = \"{}\"", "a".repeat(129)))),
            format!("invalid acceptor_id in {FILE}: {:?} must be 1 to 128 characters long", "a".repeat(129)),
        ),
        (
            env(&[("GARRISON_BACKEND", "docker")]),
            "invalid GARRISON_BACKEND (environment): unknown backend \"docker\" (expected host, local, tensorlake or modal)".into(),
        ),
        (
            flag(names::IMAGE, " ").or(env(&[])),
            "invalid --image: the image name is empty".into(),
        ),
        (
            flag(names::STATE_DIR, "").or(env(&[])),
            "invalid --state-dir: the path is empty".into(),
        ),
        (
            env(&[("SNAPSHOT_RETENTION", "30")]),
            "invalid SNAPSHOT_RETENTION (environment): \"30\" has no unit: e.g. \"30d\", \"12h\", \"90m\", \"3600s\" or \"unlimited\"".into(),
        ),
        (
            file_with_outpost("[[outpost]]\nid = \"gpu\"\ncpus = 0\n"),
            format!("invalid cpus of [[outpost]] \"gpu\" in {FILE}: 0 is out of range: more than 0 and at most 256"),
        ),
        (
            file_with_outpost("[[outpost]]\nid = \"gpu\"\nplatform = \"beos\"\n"),
            format!("invalid platform of [[outpost]] \"gpu\" in {FILE}: unknown platform \"beos\" (expected linux, macos or windows)"),
        ),
        (
            file_with_outpost("[[outpost]]\nid = \"gpu\"\nbackend = \"k8s\"\n"),
            format!("invalid backend of [[outpost]] \"gpu\" in {FILE}: unknown backend \"k8s\" (expected host, local, tensorlake or modal)"),
        ),
        (
            file_with_outpost("[[outpost]]\nid = \"gpu\"\nmax_concurrent = 0\n"),
            format!("invalid max_concurrent of [[outpost]] \"gpu\" in {FILE}: 0 is out of range 1..=10000"),
        ),
    ];
    for (raw, expected) in cases {
        assert_eq!(err(raw), expected);
    }
}

#[test]
fn an_overridden_bad_value_is_not_an_error() {
    // Only the value that wins the merge is read.
    let raw = flag(names::CPUS, "4").or(env(&[("SANDBOX_CPUS", "abc")]));
    assert_eq!(ok(raw).outposts[0].resources.cpus, 4.0);
}

#[test]
fn a_bad_top_level_value_is_an_error_even_if_every_table_overrides_it() {
    let raw = file_with_outpost("cpus = 0\n[[outpost]]\nid = \"a\"\ncpus = 2\n");
    assert_eq!(
        err(raw),
        format!("invalid cpus in {FILE}: 0 is out of range: more than 0 and at most 256")
    );
}

#[test]
fn snapshot_retention_accepts_units_and_unlimited() {
    let day = 24 * 3600;
    for (text, expected) in [
        ("30d", Some(30 * day)),
        ("12h", Some(12 * 3600)),
        ("90m", Some(90 * 60)),
        ("3600s", Some(3600)),
        (" 1d ", Some(day)),
        ("unlimited", None),
        ("UNLIMITED", None),
    ] {
        assert_eq!(
            parse_retention(text),
            Ok(expected.map(Duration::from_secs)),
            "{text:?}"
        );
    }
    for bad in [
        "",
        "30",
        "d",
        "1w",
        "1.5d",
        "-1d",
        "1d2h",
        "forever",
        "0s",
        "99999999999999999999d",
    ] {
        assert!(parse_retention(bad).is_err(), "{bad:?} must be refused");
    }
    assert!(parse_retention("0d").unwrap_err().contains("unlimited"));
}

// ---------------------------------------------------------------------------
// Default directories
// ---------------------------------------------------------------------------

#[test]
fn root_uses_the_system_directories() {
    let root = HostEnv::new(0, vars(&[("HOME", "/root"), ("XDG_DATA_HOME", "/x")]));
    assert_eq!(
        root.default_state_dir().unwrap(),
        PathBuf::from("/var/lib/garrison")
    );
    assert_eq!(root.config_dir().unwrap(), PathBuf::from("/etc/garrison"));
    assert_eq!(
        root.credentials_path().unwrap(),
        PathBuf::from("/etc/garrison/credentials.json")
    );
    assert_eq!(
        root.config_file_path().unwrap(),
        PathBuf::from("/etc/garrison/garrison.toml")
    );
}

#[test]
fn users_use_xdg_directories_or_their_home() {
    let user = host();
    assert_eq!(
        user.default_state_dir().unwrap(),
        PathBuf::from("/home/ada/.local/share/garrison")
    );
    assert_eq!(
        user.config_dir().unwrap(),
        PathBuf::from("/home/ada/.config/garrison")
    );

    let xdg = HostEnv::new(
        1000,
        vars(&[
            ("HOME", "/home/ada"),
            ("XDG_DATA_HOME", "/data"),
            ("XDG_CONFIG_HOME", "/cfg"),
        ]),
    );
    assert_eq!(
        xdg.default_state_dir().unwrap(),
        PathBuf::from("/data/garrison")
    );
    assert_eq!(xdg.config_dir().unwrap(), PathBuf::from("/cfg/garrison"));

    // The XDG spec: relative values are ignored.
    let relative = HostEnv::new(
        1000,
        vars(&[("HOME", "/home/ada"), ("XDG_DATA_HOME", "data")]),
    );
    assert_eq!(
        relative.default_state_dir().unwrap(),
        PathBuf::from("/home/ada/.local/share/garrison")
    );
}

#[test]
fn garrison_config_overrides_the_configuration_directory() {
    let h = HostEnv::new(0, vars(&[("GARRISON_CONFIG", "/srv/garrison")]));
    assert_eq!(
        h.credentials_path().unwrap(),
        PathBuf::from("/srv/garrison/credentials.json")
    );
}

#[test]
fn without_home_the_error_says_what_to_set() {
    let h = HostEnv::new(1000, BTreeMap::new());
    assert_eq!(
        h.default_state_dir().unwrap_err().to_string(),
        "cannot choose the state directory: HOME is not set; pass --state-dir or set GARRISON_HOME"
    );
    assert_eq!(
        h.config_dir().unwrap_err().to_string(),
        "cannot choose the configuration directory: HOME is not set; set GARRISON_CONFIG"
    );
    // An explicit state directory needs no HOME.
    let raw = flag(names::STATE_DIR, "/srv/g").or(env(&[]));
    assert_eq!(
        resolve(raw, None, &h, &BACKENDS)
            .expect("resolves")
            .state_dir,
        PathBuf::from("/srv/g")
    );
}

#[test]
fn the_current_host_has_a_plausible_euid() {
    // Not 0 and not a real user at once: just that /proc was read or the
    // documented fallback applied.
    let h = HostEnv::current();
    assert!(h.euid == u32::MAX || h.euid < 1 << 31, "{}", h.euid);
}

// ---------------------------------------------------------------------------
// The credentials file
// ---------------------------------------------------------------------------

fn write_mode(path: &Path, text: &str, mode: u32) {
    fs::write(path, text).expect("write");
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).expect("chmod");
}

fn mode_of(path: &Path) -> u32 {
    fs::metadata(path).expect("stat").permissions().mode() & 0o7777
}

#[test]
fn credentials_readable_by_others_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("credentials.json");
    let json =
        format!(r#"{{"api_url": "https://api.devin.ai", "outpost_id": "op", "token": "{TOKEN}"}}"#);
    for mode in [0o644, 0o640, 0o604, 0o660, 0o601] {
        write_mode(&path, &json, mode);
        let error = load_credentials(&path).expect_err("refused");
        let message = error.to_string();
        assert!(
            message.contains(&format!("run `chmod 600 {}`", path.display())),
            "{message}"
        );
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert!(!message.contains(TOKEN));
    }
    assert_eq!(
        load_credentials(&path).expect_err("refused").to_string(),
        format!(
            "refusing to read {p}: its mode 0601 lets other users read or change it; run `chmod 600 {p}`",
            p = path.display()
        )
    );
}

#[test]
fn credentials_with_mode_0600_are_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("credentials.json");
    let json =
        format!(r#"{{"api_url": "https://api.devin.ai", "outpost_id": "op", "token": "{TOKEN}"}}"#);
    write_mode(&path, &json, 0o600);
    let c = load_credentials(&path).expect("accepted").expect("present");
    assert_eq!(c, creds("https://api.devin.ai", Some("op"), TOKEN));

    // outpost_id is optional.
    write_mode(
        &path,
        r#"{"api_url": "https://api.devin.ai", "token": "t"}"#,
        0o400,
    );
    assert_eq!(
        load_credentials(&path)
            .expect("accepted")
            .expect("present")
            .outpost_id,
        None
    );
}

#[test]
fn missing_credentials_are_not_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    assert_eq!(
        load_credentials(&dir.path().join("credentials.json")).expect("ok"),
        None
    );
}

#[test]
fn malformed_credentials_never_echo_the_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("credentials.json");
    for json in [
        format!(r#"{{"api_url": "https://api.devin.ai", "token": "{TOKEN}""#),
        format!(r#"{{"api_url": "https://api.devin.ai", "token": ["{TOKEN}"]}}"#),
        format!(r#"{{"api_url": {{"{TOKEN}": 1}}, "token": "x"}}"#),
        r#"{"api_url": "https://api.devin.ai", "token": 12345678901234}"#.to_owned(),
    ] {
        write_mode(&path, &json, 0o600);
        let message = load_credentials(&path).expect_err("malformed").to_string();
        assert!(
            message.starts_with(&format!("invalid {}: ", path.display())),
            "{message}"
        );
        assert!(
            !message.contains(TOKEN) && !message.contains("12345678901234"),
            "{message}"
        );
    }
    write_mode(&path, r#"{"api_url": "https://api.devin.ai"}"#, 0o600);
    let message = load_credentials(&path).expect_err("no token").to_string();
    assert!(message.contains("missing field `token`"), "{message}");
}

#[test]
fn save_credentials_writes_0600_in_a_0700_directory_and_round_trips() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config_dir = dir.path().join("config/garrison");
    let path = config_dir.join("credentials.json");
    let c = creds("https://api.devin.ai", Some("op"), TOKEN);

    save_credentials(&path, &c).expect("saved");
    assert_eq!(mode_of(&path), 0o600);
    assert_eq!(mode_of(&config_dir), 0o700);
    assert_eq!(load_credentials(&path).expect("read").expect("present"), c);
    let text = fs::read_to_string(&path).expect("read");
    assert!(
        text.contains(&format!("\"token\": \"{TOKEN}\"")),
        "the token is stored in clear: {text}"
    );

    // Replacing a file that was too open leaves a 0600 one, and no
    // temporary file behind.
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).expect("chmod");
    let c2 = creds("https://api.devin.ai", None, "other");
    save_credentials(&path, &c2).expect("saved again");
    assert_eq!(mode_of(&path), 0o600);
    assert_eq!(load_credentials(&path).expect("read").expect("present"), c2);
    let entries: Vec<_> = fs::read_dir(&config_dir)
        .expect("ls")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(entries, ["credentials.json"]);
}

#[test]
fn save_credentials_reports_the_path_it_could_not_write() {
    let dir = tempfile::tempdir().expect("tempdir");
    let blocker = dir.path().join("file");
    fs::write(&blocker, "").expect("write");
    let path = blocker.join("credentials.json");
    let message = save_credentials(&path, &creds("https://a.test", None, TOKEN))
        .expect_err("cannot write under a file")
        .to_string();
    assert!(
        message.starts_with(&format!("cannot write {}", path.display())),
        "{message}"
    );
    assert!(!message.contains(TOKEN));
}

// ---------------------------------------------------------------------------
// The token never shows
// ---------------------------------------------------------------------------

#[test]
fn debug_output_never_shows_the_token() {
    let config = ok(env(&[]));
    assert!(!format!("{config:?}").contains(TOKEN));
    assert!(!format!("{config:#?}").contains(TOKEN));

    let c = creds("https://api.devin.ai", Some("op"), TOKEN);
    assert!(!format!("{c:?}").contains(TOKEN));

    let raw = env(&[]);
    assert!(!format!("{raw:?}").contains(TOKEN));

    let h = HostEnv::new(1000, vars(&[(TOKEN_ENV, TOKEN)]));
    let shown = format!("{h:?}");
    assert!(
        !shown.contains(TOKEN) && shown.contains(TOKEN_ENV),
        "{shown}"
    );
}

// ---------------------------------------------------------------------------
// Repositories
// ---------------------------------------------------------------------------

const GIT_TOKEN: &str = "ghp_git_token_do_not_print_0123456789";

#[test]
fn repos_come_from_flags_environment_or_file_and_tables_override_them() {
    assert_eq!(first(&ok(env(&[]))).repos, Repos::default());

    let config = ok(env(&[
        (
            "REPOS",
            "https://github.com/o/a.git, git@github.com:o/b.git,",
        ),
        ("GIT_USERNAME", "ada"),
        ("GIT_TOKEN", GIT_TOKEN),
    ]));
    let repos = &first(&config).repos;
    assert_eq!(
        repos.urls,
        ["https://github.com/o/a.git", "git@github.com:o/b.git"]
    );
    assert_eq!(repos.git_username.as_deref(), Some("ada"));
    assert_eq!(
        repos.git_token.as_ref().map(Secret::expose),
        Some(GIT_TOKEN)
    );
    assert!(!format!("{config:?}").contains(GIT_TOKEN));

    let config =
        ok(flag(names::REPOS, "https://h/o/flag").or(env(&[("REPOS", "https://h/o/env")])));
    assert_eq!(first(&config).repos.urls, ["https://h/o/flag"]);

    let text = r#"
        repos = ["https://h/o/top"]
        git_username = "bot"

        [[outpost]]
        id = "a"

        [[outpost]]
        id = "b"
        repos = ["https://h/o/own", "file:///srv/x.git"]

        [[outpost]]
        id = "c"
        repos = []
    "#;
    let config = ok(bare_env(&[(TOKEN_ENV, TOKEN), ("GIT_TOKEN", GIT_TOKEN)]).or(file(text)));
    let urls: Vec<&[String]> = config
        .outposts
        .iter()
        .map(|o| o.repos.urls.as_slice())
        .collect();
    assert_eq!(
        urls,
        [
            &["https://h/o/top".to_owned()][..],
            &["https://h/o/own".to_owned(), "file:///srv/x.git".to_owned()][..],
            &[][..]
        ]
    );
    for o in &config.outposts {
        assert_eq!(o.repos.git_username.as_deref(), Some("bot"));
        assert!(o.repos.git_token.is_some());
    }
}

#[test]
fn bad_repos_are_refused_with_their_origin_and_no_secret() {
    let message = err(env(&[(
        "REPOS",
        "https://ada:hunter2secret@github.com/o/r.git",
    )]));
    assert!(
        message.starts_with("invalid REPOS (environment): "),
        "{message}"
    );
    assert!(
        message.contains("GIT_TOKEN") && !message.contains("hunter2secret"),
        "{message}"
    );

    let message = err(env(&[("REPOS", "ftp://h/o/r")]));
    assert!(message.contains("unsupported scheme"), "{message}");
    let message = err(env(&[("REPOS", "https://h/o/r,https://h/o/r")]));
    assert!(message.contains("listed twice"), "{message}");
    let message = err(env(&[("REPOS", "https://h/o/.git.git")]));
    assert!(message.contains("directory"), "{message}");

    let text = "[[outpost]]\nid = \"a\"\nrepos = [\"nope\"]\n";
    let message = err(bare_env(&[(TOKEN_ENV, TOKEN)]).or(file(text)));
    assert!(message.contains("repos of [[outpost]] \"a\""), "{message}");

    let message = err(env(&[("GIT_TOKEN", "ghp_with space_0123456789")]));
    assert!(
        message.starts_with("invalid GIT_TOKEN (environment)"),
        "{message}"
    );
    assert!(!message.contains("ghp_with"), "{message}");
    let message = err(env(&[("GIT_USERNAME", "a\nb")]));
    assert!(
        message.starts_with("invalid GIT_USERNAME (environment)"),
        "{message}"
    );
}

#[test]
fn the_git_token_is_never_read_from_the_file() {
    let message = file_err(&format!("git_token = \"{GIT_TOKEN}\"\n"));
    assert!(
        message.contains("GIT_TOKEN in the environment"),
        "{message}"
    );
    assert!(!message.contains(GIT_TOKEN), "{message}");
}

// ---------------------------------------------------------------------------
// Backends' own settings
// ---------------------------------------------------------------------------

const TL_KEY: &str = "tl_test_key_do_not_print_0123456789";

/// Resolves with the variables in `host` rather than in the raw layers,
/// as `garrison serve` does: a backend reads the environment itself.
fn resolve_on(raw: RawSettings, host_vars: &[(&str, &str)]) -> Result<ServeConfig, SettingsError> {
    let mut all = vars(&[("HOME", "/home/ada")]);
    all.extend(vars(host_vars));
    resolve(raw, None, &HostEnv::new(1000, all), &BACKENDS)
}

#[test]
fn a_backend_is_configured_only_when_an_outpost_uses_it() {
    let config = resolve_on(env(&[("GARRISON_BACKEND", "host")]), &[]).unwrap();
    assert_eq!(
        config.backends.keys().copied().collect::<Vec<_>>(),
        ["host"]
    );

    let config = resolve_on(
        env(&[("GARRISON_BACKEND", "tensorlake")]),
        &[(FAKE_KEY_VAR, TL_KEY)],
    )
    .unwrap();
    assert_eq!(
        config.backends.keys().copied().collect::<Vec<_>>(),
        ["tensorlake"]
    );
    assert!(seen_by(&config, "tensorlake").contains(&saw(
        FAKE_KEY_VAR,
        TL_KEY,
        &format!("{FAKE_KEY_VAR} (environment)")
    )));

    // Two outposts on two backends: each configured once.
    let raw = env(&[("OUTPOST_ID", "")]).or(file(
        "[[outpost]]\nid = \"a\"\nbackend = \"host\"\n[[outpost]]\nid = \"b\"\nbackend = \"tensorlake\"\n[[outpost]]\nid = \"c\"\nbackend = \"tensorlake\"\n",
    ));
    let mut raw = raw;
    raw.outposts = None;
    let config = resolve_on(raw, &[(FAKE_KEY_VAR, TL_KEY)]).unwrap();
    assert_eq!(
        config.backends.keys().copied().collect::<Vec<_>>(),
        ["host", "tensorlake"]
    );
}

#[test]
fn a_backend_in_use_stops_resolution_with_its_own_error() {
    let message = resolve_on(env(&[("GARRISON_BACKEND", "tensorlake")]), &[])
        .expect_err("no key")
        .to_string();
    assert_eq!(
        message,
        format!("the tensorlake backend needs {FAKE_KEY_VAR}")
    );
}

#[test]
fn a_backend_reads_the_file_keys_it_declared() {
    let raw = env(&[("GARRISON_BACKEND", "tensorlake")])
        .or(file("fake_image = \"img\"\nfake_timeout_secs = 60\n"));
    let config = resolve_on(raw, &[(FAKE_KEY_VAR, TL_KEY)]).unwrap();
    let seen = seen_by(&config, "tensorlake");
    assert!(
        seen.contains(&saw("fake_image", "img", &format!("fake_image in {FILE}"))),
        "{seen}"
    );
    assert!(
        seen.contains(&saw(
            "fake_timeout_secs",
            "60",
            &format!("fake_timeout_secs in {FILE}")
        )),
        "{seen}"
    );
    // Not a declared key: an error, with its position; a refused one says why.
    assert!(file_err("fake_imag = 1").starts_with(&format!(
        "invalid {FILE}: line 1, column 1: unknown key `fake_imag`"
    )));
    let message = file_err("fake_api_key = \"x\"");
    assert!(message.contains("never from this file"), "{message}");
    assert!(
        file_err("fake_image = [1]").contains(
            "line 1, column 14: fake_image must be a string, a number or a list of strings"
        )
    );
}

#[test]
fn a_backend_reads_a_list_of_the_file_as_comma_separated_text() {
    let raw = env(&[("GARRISON_BACKEND", "tensorlake")]).or(file("fake_gpus = [\"a\", \"b\"]\n"));
    let config = resolve_on(raw, &[(FAKE_KEY_VAR, TL_KEY)]).unwrap();
    let seen = seen_by(&config, "tensorlake");
    assert!(
        seen.contains(&saw("fake_gpus", "a,b", &format!("fake_gpus in {FILE}"))),
        "{seen}"
    );
}

#[test]
fn a_backend_only_setting_is_refused_when_no_outpost_uses_its_backend() {
    let message = resolve_on(env(&[("GARRISON_BACKEND", "host")]), &[("FAKE_GPUS", "a")])
        .expect_err("refused")
        .to_string();
    assert!(message.contains("FAKE_GPUS (environment)"), "{message}");
    assert!(
        message.contains("fake_gpus is a setting of the tensorlake backend, and no outpost uses it (backend host)"),
        "{message}"
    );
    let message = resolve_on(
        env(&[("GARRISON_BACKEND", "host")]).or(file("fake_gpus = [\"a\"]\n")),
        &[],
    )
    .expect_err("refused")
    .to_string();
    assert!(
        message.contains(&format!("fake_gpus in {FILE}")),
        "{message}"
    );
    // Where its backend is used, it is that backend's to read.
    resolve_on(
        env(&[("GARRISON_BACKEND", "tensorlake")]),
        &[(FAKE_KEY_VAR, TL_KEY), ("FAKE_GPUS", "a")],
    )
    .unwrap();
}

// ---------------------------------------------------------------------------
// Snapshot store, key and integrity fallback

#[test]
fn a_snapshot_store_url_or_directory_is_checked_and_never_echoes_a_password() {
    let config = ok(flag(names::SNAPSHOT_STORE, "file:///srv/snapshots").or(env(&[])));
    assert_eq!(config.snapshot_dir, PathBuf::from("/srv/snapshots"));
    assert!(config.snapshot_store.is_none());
    let error = err(flag(names::SNAPSHOT_STORE, "s3://AKIA:hunter2@bucket/p").or(env(&[])));
    assert!(
        error.contains("--snapshot-store") && error.contains("credentials"),
        "{error}"
    );
    assert!(!error.contains("hunter2"), "{error}");
    let error = err(flag(names::SNAPSHOT_STORE, "ftp://bucket/p").or(env(&[])));
    assert!(
        error.contains("--snapshot-store") && error.contains("ftp://"),
        "{error}"
    );
    let both = flag(names::SNAPSHOT_STORE, "/a").or(env(&[("GARRISON_SNAPSHOT_DIR", "/b")]));
    let error = err(both);
    assert!(
        error.contains("--snapshot-store") && error.contains("GARRISON_SNAPSHOT_DIR"),
        "{error}"
    );
    let error = err(flag(names::SNAPSHOT_INTEGRITY_FALLBACK, "maybe").or(env(&[])));
    assert!(error.contains("--snapshot-integrity-fallback"), "{error}");
}

#[test]
fn the_snapshot_key_comes_from_the_environment_or_a_private_file() {
    let hex = "0f".repeat(32);
    let store = || flag(names::SNAPSHOT_STORE, "s3://bucket/p");
    let config = ok(store().or(env(&[(SNAPSHOT_KEY_ENV, &hex)])));
    assert!(config.snapshot_store.unwrap().key.is_some());
    assert!(
        ok(store().or(env(&[])))
            .snapshot_store
            .unwrap()
            .key
            .is_none()
    );

    let bad = err(store().or(env(&[(SNAPSHOT_KEY_ENV, "secret-but-short")])));
    assert!(
        bad.contains(SNAPSHOT_KEY_ENV) && bad.contains("64 hex digits"),
        "{bad}"
    );
    assert!(!bad.contains("secret-but-short"), "{bad}");

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("key");
    fs::write(&file, format!("{hex}\n")).unwrap();
    fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).unwrap();
    let with_file = || {
        store()
            .or(flag(names::SNAPSHOT_KEY_FILE, file.to_str().unwrap()))
            .or(env(&[]))
    };
    let open = err(with_file());
    assert!(
        open.contains("--snapshot-key-file") && open.contains("0644"),
        "{open}"
    );
    fs::set_permissions(&file, fs::Permissions::from_mode(0o600)).unwrap();
    assert!(ok(with_file()).snapshot_store.unwrap().key.is_some());

    let twice = err(with_file().or(env(&[(SNAPSHOT_KEY_ENV, &hex)])));
    assert!(twice.contains(SNAPSHOT_KEY_ENV), "{twice}");
    // A key without an object store to encrypt is a mistake, not a no-op.
    let lonely = err(env(&[(SNAPSHOT_KEY_ENV, &hex)]));
    assert!(
        lonely.contains(SNAPSHOT_KEY_ENV) && lonely.contains("snapshot_store"),
        "{lonely}"
    );
}

#[test]
fn a_gateway_fallback_must_be_a_websocket_url_and_the_grace_is_in_seconds() {
    let config = ok(flag(names::GATEWAY_URL, "wss://gateway.example.com").or(env(&[])));
    assert_eq!(
        config.gateway_url.as_deref(),
        Some("wss://gateway.example.com/")
    );
    assert_eq!(ok(env(&[])).gateway_url, None);
    let refused = err(flag(names::GATEWAY_URL, "https://gateway.example.com").or(env(&[])));
    assert!(refused.starts_with("invalid --gateway-url: "), "{refused}");
    let from_env = ok(env(&[("DEVIN_OUTPOST_GATEWAY_URL", "ws://127.0.0.1:9")]));
    assert_eq!(from_env.gateway_url.as_deref(), Some("ws://127.0.0.1:9/"));

    let grace = ok(flag(names::SUSPEND_EXIT_GRACE_SECS, "300").or(env(&[])));
    assert_eq!(grace.policy.suspend_exit_grace_ms, 300_000);
    assert_eq!(
        ok(env(&[])).policy.suspend_exit_grace_ms,
        crate::planner::DEFAULT_SUSPEND_EXIT_GRACE_MS
    );
}
