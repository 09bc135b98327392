//! The Modal settings' resolution: every layer, validation, the token's sources.

use std::fs;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::*;
use crate::PLUGIN;
use sandbox::plugin::BackendPlugin;

fn host(vars: &[(&str, &str)]) -> common::settings::MapSource {
    let mut source = common::settings::MapSource::vars(vars);
    source.home = vars
        .iter()
        .find(|(k, _)| *k == "HOME")
        .map(|(_, v)| PathBuf::from(v));
    source
}

fn write(path: &Path, text: &str, mode: u32) {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .unwrap();
    std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn defaults_with_a_token_from_the_environment() {
    let m = resolve(&host(&[(TOKEN_ID_ENV, "ak-1"), (TOKEN_SECRET_ENV, "as-1")])).unwrap();
    assert_eq!(m.api_url, "https://api.modal.com");
    assert_eq!(m.credentials.token_id.expose(), "ak-1");
    assert_eq!(m.credentials.token_secret.expose(), "as-1");
    assert_eq!(m.timeout, Duration::from_secs(86400));
    assert!(m.regions.is_empty() && m.image.is_none());
    assert!(!format!("{m:?}").contains("as-1"));
}

#[test]
fn every_setting_is_read_and_checked() {
    let base = [(TOKEN_ID_ENV, "ak-1"), (TOKEN_SECRET_ENV, "as-1")];
    let with = |extra: &[(&str, &str)]| {
        let mut vars = base.to_vec();
        vars.extend_from_slice(extra);
        resolve(&host(&vars))
    };
    let m = with(&[
        (API_URL_ENV, "http://127.0.0.1:9000/"),
        (IMAGE_ENV, "im-abc"),
        (REGION_ENV, "us-east, eu-west"),
        (TIMEOUT_ENV, "600"),
        (IDLE_TIMEOUT_ENV, "900"),
        (RUNTIME_ENV, "vm"),
    ])
    .unwrap();
    assert_eq!(m.idle_timeout, Some(Duration::from_secs(900)));
    assert_eq!(m.runtime, Some(crate::Runtime::Vm));
    assert_eq!(m.api_url, "http://127.0.0.1:9000");
    assert_eq!(m.image.as_deref(), Some("im-abc"));
    assert_eq!(m.regions, ["us-east", "eu-west"]);
    assert_eq!(m.timeout, Duration::from_secs(600));
    for (var, bad) in [
        (API_URL_ENV, "ftp://x"),
        (IMAGE_ENV, "../etc"),
        (REGION_ENV, "us east"),
        (TIMEOUT_ENV, "0"),
        (TIMEOUT_ENV, "86401"),
        (IDLE_TIMEOUT_ENV, "0"),
        (RUNTIME_ENV, "firecracker"),
        (SERVER_URL_ENV, "not a url"),
    ] {
        let err = with(&[(var, bad)]).unwrap_err().to_string();
        assert!(err.contains(var), "{var}={bad}: {err}");
    }
    let err = resolve(&host(&[(TOKEN_ID_ENV, "ak-1"), ("HOME", "/nonexistent")]))
        .unwrap_err()
        .to_string();
    assert!(err.contains(TOKEN_SECRET_ENV), "{err}");
}

#[test]
fn modal_server_url_is_read_first_and_modal_api_url_is_its_alias() {
    let base = [(TOKEN_ID_ENV, "ak-1"), (TOKEN_SECRET_ENV, "as-1")];
    let url = |extra: &[(&str, &str)]| {
        let mut vars = base.to_vec();
        vars.extend_from_slice(extra);
        resolve(&host(&vars)).unwrap().api_url
    };
    assert_eq!(
        url(&[(SERVER_URL_ENV, "http://127.0.0.1:1/")]),
        "http://127.0.0.1:1"
    );
    assert_eq!(
        url(&[(API_URL_ENV, "http://127.0.0.1:2")]),
        "http://127.0.0.1:2"
    );
    assert_eq!(
        url(&[
            (SERVER_URL_ENV, "http://127.0.0.1:1"),
            (API_URL_ENV, "http://127.0.0.1:2")
        ]),
        "http://127.0.0.1:1"
    );
}

#[test]
fn the_token_comes_from_modals_own_file_when_not_in_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(".modal.toml");
    write(
        &path,
        "[a]\ntoken_id = \"ak-a\"\ntoken_secret = \"as-a\"\n\n[b]\ntoken_id = \"ak-b\"\ntoken_secret = \"as-b\"\nactive = true\n",
        0o600,
    );
    let home = dir.path().to_str().unwrap();
    let m = resolve(&host(&[("HOME", home)])).unwrap();
    assert_eq!(m.credentials.token_id.expose(), "ak-b");
    let m = resolve(&host(&[("HOME", home), (PROFILE_ENV, "a")])).unwrap();
    assert_eq!(m.credentials.token_secret.expose(), "as-a");
    let err = resolve(&host(&[("HOME", home), (PROFILE_ENV, "c")])).unwrap_err();
    assert!(err.to_string().contains("[c]"), "{err}");

    // A file other users can read is refused, and never quoted.
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    let err = resolve(&host(&[("HOME", home)])).unwrap_err().to_string();
    assert!(err.contains("chmod 600") && !err.contains("as-b"), "{err}");

    // No file, no variables: the message says what to do.
    let err = resolve(&host(&[("HOME", "/nonexistent")]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("modal token new"), "{err}");
}

/// [`host`] with flags above it, as `garrison serve` gives them.
struct WithFlags {
    below: common::settings::MapSource,
    flags: Vec<(&'static str, &'static str, &'static str)>,
}

impl SettingsSource for WithFlags {
    fn var(&self, name: &'static str) -> Option<common::settings::Sourced<String>> {
        self.below.var(name)
    }

    fn file_key(&self, key: &'static str) -> Option<common::settings::Sourced<String>> {
        self.below.file_key(key)
    }

    fn home(&self) -> Option<PathBuf> {
        self.below.home()
    }

    fn flag(&self, key: &'static str) -> Option<common::settings::Sourced<String>> {
        self.flags
            .iter()
            .find(|(k, _, _)| *k == key)
            .map(|(_, flag, v)| common::settings::Sourced::new((*v).to_owned(), Origin::Flag(flag)))
    }
}

const FILE: &str = "/etc/garrison/garrison.toml";

fn in_file(source: &mut common::settings::MapSource, pairs: &[(&'static str, &str)]) {
    for (key, value) in pairs {
        source.file.insert(
            (*key).to_owned(),
            common::settings::Sourced::new(
                (*value).to_owned(),
                Origin::file(Path::new(FILE), key, None),
            ),
        );
    }
}

#[test]
fn every_setting_comes_from_the_file_too_and_a_flag_beats_its_variable_beats_the_file() {
    let mut source = host(&[
        (TOKEN_ID_ENV, "ak-1"),
        (TOKEN_SECRET_ENV, "as-1"),
        (IMAGE_ENV, "from-env"),
        (TIMEOUT_ENV, "700"),
    ]);
    in_file(
        &mut source,
        &[
            (SERVER_URL_KEY, "http://127.0.0.1:9000"),
            (ENVIRONMENT_KEY, "staging"),
            (IMAGE_KEY, "from-file"),
            (REGION_KEY, "eu-west"),
            (TIMEOUT_KEY, "600"),
            (IDLE_TIMEOUT_KEY, "300"),
            (RUNTIME_KEY, "vm"),
        ],
    );
    let m = resolve(&source).unwrap();
    assert_eq!(m.api_url, "http://127.0.0.1:9000");
    assert_eq!(m.environment.as_deref(), Some("staging"));
    assert_eq!(m.image.as_deref(), Some("from-env"));
    assert_eq!(m.regions, ["eu-west"]);
    assert_eq!(m.timeout, Duration::from_secs(700));
    assert_eq!(m.idle_timeout, Some(Duration::from_secs(300)));
    assert_eq!(m.runtime, Some(crate::Runtime::Vm));

    // Both variables of the API's URL beat the file.
    let mut alias = host(&[
        (TOKEN_ID_ENV, "ak-1"),
        (TOKEN_SECRET_ENV, "as-1"),
        (API_URL_ENV, "http://127.0.0.1:2"),
    ]);
    in_file(&mut alias, &[(SERVER_URL_KEY, "http://127.0.0.1:9000")]);
    assert_eq!(resolve(&alias).unwrap().api_url, "http://127.0.0.1:2");

    let flagged = WithFlags {
        below: source,
        flags: vec![
            (IMAGE_KEY, "--modal-image", "from-flag"),
            (SERVER_URL_KEY, "--modal-server-url", "http://127.0.0.1:1/"),
            (RUNTIME_KEY, "--modal-sandbox-runtime", "gvisor"),
        ],
    };
    let m = resolve(&flagged).unwrap();
    assert_eq!(m.image.as_deref(), Some("from-flag"));
    assert_eq!(m.api_url, "http://127.0.0.1:1");
    assert_eq!(m.runtime, Some(crate::Runtime::Gvisor));
    assert_eq!(m.timeout, Duration::from_secs(700));

    // A bad value is refused naming where it was given.
    let mut bad = flagged;
    bad.flags = vec![(TIMEOUT_KEY, "--modal-sandbox-timeout-secs", "0")];
    let err = resolve(&bad).unwrap_err().to_string();
    assert!(err.contains("--modal-sandbox-timeout-secs"), "{err}");
    bad.flags.clear();
    for (key, value) in [
        (RUNTIME_KEY, "firecracker"),
        (IDLE_TIMEOUT_KEY, "86401"),
        (REGION_KEY, "us east"),
        (IMAGE_KEY, "../etc"),
    ] {
        let mut source = host(&[(TOKEN_ID_ENV, "ak-1"), (TOKEN_SECRET_ENV, "as-1")]);
        in_file(&mut source, &[(key, value)]);
        let err = resolve(&source).unwrap_err().to_string();
        assert!(
            err.contains(&format!("{key} in {FILE}")),
            "{key}={value}: {err}"
        );
    }
}

#[test]
fn modals_own_file_and_profile_may_be_named_in_garrisons_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("modal.toml");
    write(
        &path,
        "[a]\ntoken_id = \"ak-a\"\ntoken_secret = \"as-a\"\nenvironment = \"env-a\"\n\n[b]\ntoken_id = \"ak-b\"\ntoken_secret = \"as-b\"\nactive = true\n",
        0o600,
    );
    let mut source = host(&[("HOME", "/nonexistent")]);
    in_file(
        &mut source,
        &[
            (CONFIG_PATH_KEY, path.to_str().unwrap()),
            (PROFILE_KEY, "a"),
        ],
    );
    let m = resolve(&source).unwrap();
    assert_eq!(m.credentials.token_id.expose(), "ak-a");
    assert_eq!(m.environment.as_deref(), Some("env-a"));
    // Garrison's file beats the profile's environment.
    in_file(&mut source, &[(ENVIRONMENT_KEY, "mine")]);
    assert_eq!(
        resolve(&source).unwrap().environment.as_deref(),
        Some("mine")
    );
}

#[test]
fn the_table_declares_the_token_secret_and_every_other_setting_with_a_flag() {
    use common::settings::spec::find;
    for name in [TOKEN_ID_KEY, TOKEN_SECRET_KEY] {
        let row = find(SETTINGS, name).unwrap();
        assert!(row.secret && row.flag.is_none() && !row.in_file, "{name}");
        assert!(REFUSED_FILE_KEYS.iter().any(|(k, _)| *k == name), "{name}");
    }
    for row in SETTINGS.iter().filter(|s| !s.secret) {
        assert!(row.in_file && row.flag.is_some(), "{}", row.name);
        assert!(
            PLUGIN.settings_help().contains(row.env.unwrap()),
            "{}",
            row.name
        );
    }
    assert_eq!(
        find(SETTINGS, TIMEOUT_KEY).unwrap().kind.int_range(),
        1..=MAX_TIMEOUT_SECS as i64
    );
}
