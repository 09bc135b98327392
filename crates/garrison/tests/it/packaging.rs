//! The files in `packaging/` say what they mean: the sample configuration
//! loads through the same parser `garrison serve` uses and gives its
//! documented values, the systemd unit runs `garrison serve` and lets
//! sandboxes outlive the daemon, the deploy units run the Tensorlake
//! keep-alive every five minutes, and the Containerfile builds garrison
//! from source and runs it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use orchestrator::settings::{self, HostEnv};

/// The binary's own registry of backends.
#[path = "../../src/backends.rs"]
#[allow(dead_code)]
mod backends;

fn packaging(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../packaging")
        .join(name)
}

fn read(name: &str) -> String {
    std::fs::read_to_string(packaging(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn the_sample_config_loads_with_its_documented_values() {
    let path = packaging("garrison.toml.example");
    let raw = settings::parse_file(&path, &read("garrison.toml.example"), &backends::ALL)
        .expect("parses");
    // As root, with the token in the environment, as the unit runs it.
    let host = HostEnv::new(
        0,
        BTreeMap::from([(settings::TOKEN_ENV.to_owned(), "cog_example".to_owned())]),
    );
    let config = settings::resolve(
        raw.or(settings::RawSettings::from_env(&host)),
        None,
        &host,
        &backends::ALL,
    )
    .expect("resolves");
    assert_eq!(config.api_url, "https://api.devin.ai");
    assert_eq!(
        config.static_base_url,
        "https://static.devin.ai/devin-rs/remote/"
    );
    assert_eq!(config.acceptor_id, None);
    assert_eq!(config.state_dir, Path::new("/var/lib/garrison"));
    assert_eq!(
        config.snapshot_dir,
        Path::new("/var/lib/garrison/snapshots")
    );
    assert_eq!(
        config.snapshot_retention,
        Some(Duration::from_secs(30 * 86_400))
    );
    assert_eq!(config.relist_interval, Duration::from_secs(30));
    assert_eq!(config.policy.max_restarts, 3);

    let [a, b] = config.outposts.as_slice() else {
        panic!("two outposts: {:?}", config.outposts);
    };
    assert_eq!(a.outpost_id, "outpost_env-aaa");
    assert_eq!(a.backend, "local");
    assert_eq!(a.max_concurrent, 5);
    assert_eq!(
        (a.resources.cpus, a.resources.memory_mb, a.resources.disk_mb),
        (2.0, 8192, 10240)
    );
    assert_eq!(a.image, None);
    assert_eq!(b.outpost_id, "outpost_env-bbb");
    assert_eq!(b.backend, "host");
    assert_eq!(b.max_concurrent, 2);
    assert_eq!(
        (b.resources.cpus, b.resources.memory_mb, b.resources.disk_mb),
        (8.0, 16384, 20480)
    );
    assert_eq!(b.platform, fleet::Platform::Linux);
}

/// `[Section]` -> key -> values (a key may repeat, e.g. `Environment=`).
type Unit = BTreeMap<String, BTreeMap<String, Vec<String>>>;

fn parse_unit(text: &str) -> Unit {
    let mut unit = Unit::new();
    let mut section = String::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_owned();
            unit.entry(section.clone()).or_default();
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("not key=value: {line:?}"));
        assert!(!section.is_empty(), "{key} outside a section");
        unit.entry(section.clone())
            .or_default()
            .entry(key.trim().to_owned())
            .or_default()
            .push(value.trim().to_owned());
    }
    unit
}

#[test]
fn the_unit_runs_garrison_serve_and_leaves_sandboxes_running() {
    let unit = parse_unit(&read("garrison.service"));
    let one = |section: &str, key: &str| -> String {
        let values = unit
            .get(section)
            .and_then(|s| s.get(key))
            .unwrap_or_else(|| panic!("[{section}] has no {key}"));
        assert_eq!(values.len(), 1, "[{section}] {key} given twice");
        values[0].clone()
    };
    let exec = one("Service", "ExecStart");
    let argv: Vec<&str> = exec.split_whitespace().collect();
    assert_eq!(
        argv[..2],
        ["/usr/local/bin/garrison", "serve"],
        "ExecStart={exec}"
    );
    assert_eq!(argv[2..], ["--config", "/etc/garrison/garrison.toml"]);
    assert_eq!(one("Service", "EnvironmentFile"), "-/etc/garrison/env");
    // Sessions' containers live in the unit's cgroup.
    assert_eq!(one("Service", "KillMode"), "process");
    assert_eq!(one("Service", "Restart"), "on-failure");
    // A configuration error (exit 78) is not restarted into a loop.
    assert_eq!(one("Service", "RestartPreventExitStatus"), "78");
    assert_eq!(one("Service", "StateDirectory"), "garrison");
    assert!(one("Service", "TimeoutStopSec").parse::<u32>().is_ok());
    assert_eq!(one("Install", "WantedBy"), "multi-user.target");
    // Settings that would break root container management stay off.
    let service = &unit["Service"];
    for key in [
        "ProtectSystem",
        "PrivateDevices",
        "NoNewPrivileges",
        "PrivateTmp",
        "RestrictNamespaces",
    ] {
        assert!(
            !service.contains_key(key),
            "{key} would break the local backend"
        );
    }
    // The token is never on the command line.
    assert!(!exec.contains("cog_") && !exec.contains("token"));
}

#[test]
fn the_containerfile_copies_the_binaries_and_runs_garrison() {
    // Continued lines joined, as the builder reads them.
    let text = read("Containerfile").replace("\\\n", " ");
    let instructions: Vec<(&str, &str)> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once(' '))
        .filter(|(word, _)| word.chars().all(|c| c.is_ascii_uppercase()))
        .collect();
    let first = |name: &str| {
        instructions
            .iter()
            .find(|(word, _)| *word == name)
            .map(|(_, rest)| rest.trim())
            .unwrap_or_else(|| panic!("no {name} in the Containerfile"))
    };
    // Built from source in a first stage; the image runs on Debian 12.
    let froms: Vec<&str> = instructions
        .iter()
        .filter(|(word, _)| *word == "FROM")
        .map(|(_, rest)| rest.trim())
        .collect();
    assert_eq!(froms.len(), 2, "{froms:?}");
    assert!(froms[0].ends_with(" AS build"), "{froms:?}");
    assert!(froms[1].contains("debian:12"), "{froms:?}");
    let build = first("RUN");
    assert!(
        build.contains("cargo build --release --locked -p garrison"),
        "{build}"
    );
    assert!(build.contains("+crt-static"), "the shim is static: {build}");
    let copy = instructions
        .iter()
        .find(|(word, rest)| *word == "COPY" && rest.starts_with("--from=build"))
        .map(|(_, rest)| *rest)
        .expect("the binaries are copied from the build stage");
    for binary in ["garrison", "garrison-shim", "devin-remote-sim"] {
        assert!(copy.contains(&format!("/out/{binary}")), "{copy}");
    }
    // The build context leaves out the (many GB) target directory.
    let ignore = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.containerignore"),
    )
    .expect(".containerignore");
    assert!(ignore.lines().any(|l| l.trim() == "target"), "{ignore}");
    let entrypoint: Vec<String> =
        serde_json::from_str(first("ENTRYPOINT")).expect("ENTRYPOINT is an exec-form array");
    assert_eq!(
        entrypoint.last().map(String::as_str),
        Some("/usr/local/bin/garrison")
    );
    let cmd: Vec<String> = serde_json::from_str(first("CMD")).expect("CMD is an array");
    assert_eq!(cmd, ["serve"]);
}

#[test]
fn the_deploy_units_run_garrison_deploy_tensorlake_every_five_minutes() {
    let service = parse_unit(&read("garrison-deploy.service"));
    let get = |unit: &Unit, section: &str, key: &str| -> String {
        let values = unit
            .get(section)
            .and_then(|s| s.get(key))
            .unwrap_or_else(|| panic!("[{section}] has no {key}"));
        assert_eq!(values.len(), 1, "[{section}] {key} given twice");
        values[0].clone()
    };
    assert_eq!(get(&service, "Service", "Type"), "oneshot");
    assert_eq!(
        get(&service, "Service", "ExecStart"),
        "/usr/local/bin/garrison deploy tensorlake"
    );
    // The credentials come from a root-only file, never the command line.
    assert_eq!(
        get(&service, "Service", "EnvironmentFile"),
        "/etc/garrison/deploy.env"
    );
    let text = read("garrison-deploy.service");
    assert!(
        text.contains("chmod 600 /etc/garrison/deploy.env"),
        "{text}"
    );
    assert!(!text.contains("ExecStart=/usr/local/bin/garrison deploy tensorlake --"));

    let timer = parse_unit(&read("garrison-deploy.timer"));
    assert_eq!(get(&timer, "Timer", "Unit"), "garrison-deploy.service");
    assert_eq!(get(&timer, "Timer", "OnUnitActiveSec"), "5min");
    assert_eq!(get(&timer, "Timer", "Persistent"), "yes");
    assert_eq!(get(&timer, "Install", "WantedBy"), "timers.target");

    // The command line the service runs parses as a deploy (no network is
    // needed for --help).
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_garrison"))
        .args(["deploy", "tensorlake", "--help"])
        .output()
        .unwrap();
    assert!(output.status.success());
}

#[test]
fn the_modal_deploy_units_run_garrison_deploy_modal_every_five_minutes() {
    let get = |unit: &Unit, section: &str, key: &str| -> String {
        let values = unit
            .get(section)
            .and_then(|s| s.get(key))
            .unwrap_or_else(|| panic!("[{section}] has no {key}"));
        assert_eq!(values.len(), 1, "[{section}] {key} given twice");
        values[0].clone()
    };
    let service = parse_unit(&read("garrison-deploy-modal.service"));
    assert_eq!(get(&service, "Service", "Type"), "oneshot");
    assert_eq!(
        get(&service, "Service", "ExecStart"),
        "/usr/local/bin/garrison deploy modal"
    );
    // The credentials come from a root-only file, never the command line.
    assert_eq!(
        get(&service, "Service", "EnvironmentFile"),
        "/etc/garrison/deploy-modal.env"
    );
    let text = read("garrison-deploy-modal.service");
    assert!(
        text.contains("chmod 600 /etc/garrison/deploy-modal.env"),
        "{text}"
    );

    let timer = parse_unit(&read("garrison-deploy-modal.timer"));
    assert_eq!(
        get(&timer, "Timer", "Unit"),
        "garrison-deploy-modal.service"
    );
    assert_eq!(get(&timer, "Timer", "OnUnitActiveSec"), "5min");
    assert_eq!(get(&timer, "Timer", "Persistent"), "yes");
    assert_eq!(get(&timer, "Install", "WantedBy"), "timers.target");

    let output = std::process::Command::new(env!("CARGO_BIN_EXE_garrison"))
        .args(["deploy", "modal", "--help"])
        .output()
        .unwrap();
    assert!(output.status.success());
}
