use std::path::{Path, PathBuf};

use serde_json::json;

use super::*;

/// The shape `nvidia-ctk cdi generate` writes (trimmed to one GPU; paths
/// and versions as on a real host), which must parse unchanged.
const NVIDIA_CTK: &str = r#"---
cdiVersion: 0.5.0
containerEdits:
  deviceNodes:
  - path: /dev/nvidia-modeset
  - path: /dev/nvidia-uvm
  - path: /dev/nvidia-uvm-tools
  - path: /dev/nvidiactl
  env:
  - NVIDIA_VISIBLE_DEVICES=void
  hooks:
  - args:
    - nvidia-cdi-hook
    - create-symlinks
    - --link
    - libglxserver_nvidia.so.550.54.15::/usr/lib/x86_64-linux-gnu/nvidia/xorg/libglxserver_nvidia.so
    hookName: createContainer
    path: /usr/bin/nvidia-cdi-hook
  - args:
    - nvidia-cdi-hook
    - update-ldcache
    - --folder
    - /usr/lib/x86_64-linux-gnu
    hookName: createContainer
    path: /usr/bin/nvidia-cdi-hook
  mounts:
  - containerPath: /usr/bin/nvidia-smi
    hostPath: /usr/bin/nvidia-smi
    options:
    - ro
    - nosuid
    - nodev
    - bind
  - containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15
    hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15
    options:
    - ro
    - nosuid
    - nodev
    - bind
devices:
- containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
    - path: /dev/dri/card1
    - path: /dev/dri/renderD128
    hooks:
    - args:
      - nvidia-cdi-hook
      - create-symlinks
      - --link
      - ../card1::/dev/dri/by-path/pci-0000:01:00.0-card
      hookName: createContainer
      path: /usr/bin/nvidia-cdi-hook
  name: "0"
- containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
  name: GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c
- containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
  name: all
kind: nvidia.com/gpu
"#;

/// A harmless spec: /dev/null with everything read from the host.
const NULL_SPEC: &str = r#"{
  "cdiVersion": "0.6.0",
  "kind": "example.com/null",
  "futureField": {"ignored": true},
  "containerEdits": {"env": ["FROM_SPEC=1"]},
  "devices": [
    {"name": "one", "annotations": {"x": "y"},
     "containerEdits": {"env": ["WHICH=one"], "deviceNodes": [{"path": "/dev/null"}]}},
    {"name": "two", "containerEdits": {"env": ["WHICH=two"],
      "deviceNodes": [{"path": "/dev/zero", "permissions": "rw"}]}}
  ]
}"#;

fn dir_with(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    dir
}

fn names(registry: &Registry) -> Vec<String> {
    registry.devices().into_iter().map(|f| f.name).collect()
}

#[test]
fn nvidia_ctk_output_parses_unchanged() {
    let spec = spec::parse(Path::new("nvidia.yaml"), NVIDIA_CTK).unwrap();
    assert_eq!(spec.kind, "nvidia.com/gpu");
    assert_eq!(spec.cdi_version, "0.5.0");
    let devices: Vec<&str> = spec.devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(
        devices,
        ["0", "GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c", "all"]
    );
    let edits = &spec.container_edits;
    assert_eq!(edits.hooks.len(), 2);
    assert_eq!(edits.hooks[0].hook_name, "createContainer");
    assert_eq!(edits.hooks[0].path, "/usr/bin/nvidia-cdi-hook");
    assert_eq!(edits.mounts[0].options, ["ro", "nosuid", "nodev", "bind"]);
    assert_eq!(edits.device_nodes[3].path, "/dev/nvidiactl");
    assert_eq!(edits.device_nodes[3].major, None);
    assert_eq!(
        spec.devices[0].container_edits.device_nodes[2].path,
        "/dev/dri/renderD128"
    );

    let dir = dir_with(&[("nvidia.yaml", NVIDIA_CTK)]);
    let registry = Registry::load(&[dir.path().to_owned()]);
    assert!(registry.errors().is_empty(), "{:?}", registry.errors());
    assert_eq!(
        names(&registry),
        [
            "nvidia.com/gpu=0",
            "nvidia.com/gpu=GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c",
            "nvidia.com/gpu=all"
        ]
    );
}

#[test]
fn json_specs_parse_with_unknown_fields_and_nodes_are_read_from_the_host() {
    let dir = dir_with(&[("null.json", NULL_SPEC), ("notes.txt", "not a spec")]);
    let registry = Registry::load(&[dir.path().to_owned()]);
    assert!(registry.errors().is_empty(), "{:?}", registry.errors());
    assert_eq!(
        registry.devices(),
        [
            Found {
                name: "example.com/null=one".into(),
                spec_file: dir.path().join("null.json")
            },
            Found {
                name: "example.com/null=two".into(),
                spec_file: dir.path().join("null.json")
            }
        ]
    );
    let edits = registry
        .resolve(&["example.com/null=one".into(), "example.com/null=two".into()])
        .unwrap();
    // The spec's own edits once, then each device's.
    assert_eq!(edits.env, ["FROM_SPEC=1", "WHICH=one", "WHICH=two"]);
    let null = &edits.device_nodes[0];
    assert_eq!(
        (null.kind.as_str(), null.major, null.minor),
        ("c", 1, 3),
        "/dev/null is char 1:3"
    );
    assert_eq!(null.host_path, "/dev/null");
    assert_eq!(null.permissions, "rwm");
    assert_eq!(edits.device_nodes[1].permissions, "rw");
    assert_eq!(edits.device_nodes[1].minor, 5, "/dev/zero is char 1:5");
}

#[test]
fn a_malformed_spec_is_an_error_naming_its_file() {
    let dir = dir_with(&[
        ("broken.yaml", "cdiVersion: 0.5.0\nkind: [not, a, kind\n"),
        ("null.json", NULL_SPEC),
    ]);
    let registry = Registry::load(&[dir.path().to_owned()]);
    let broken = dir.path().join("broken.yaml");
    assert_eq!(registry.errors().len(), 1);
    assert_eq!(registry.errors()[0].0, broken);
    // The other file's devices are still there.
    assert_eq!(names(&registry).len(), 2);
    let err = registry
        .resolve(&["example.com/broken=x".into()])
        .unwrap_err()
        .to_string();
    assert!(err.contains(&broken.display().to_string()), "{err}");
}

#[test]
fn specs_that_break_the_rules_are_refused() {
    let bad = [
        (
            "kind",
            r#"{"cdiVersion":"0.5.0","kind":"nokind","devices":[{"name":"a"}]}"#,
        ),
        (
            "name",
            r#"{"cdiVersion":"0.5.0","kind":"a.com/b","devices":[{"name":"-a"}]}"#,
        ),
        (
            "no devices",
            r#"{"cdiVersion":"0.5.0","kind":"a.com/b","devices":[]}"#,
        ),
        (
            "relative",
            r#"{"cdiVersion":"0.5.0","kind":"a.com/b","devices":[{"name":"a","containerEdits":{"mounts":[{"hostPath":"x","containerPath":"/x"}]}}]}"#,
        ),
        (
            "dotdot",
            r#"{"cdiVersion":"0.5.0","kind":"a.com/b","devices":[{"name":"a","containerEdits":{"deviceNodes":[{"path":"/dev/../etc/x"}]}}]}"#,
        ),
        (
            "hook",
            r#"{"cdiVersion":"0.5.0","kind":"a.com/b","devices":[{"name":"a","containerEdits":{"hooks":[{"hookName":"whenever","path":"/bin/true"}]}}]}"#,
        ),
        (
            "env",
            r#"{"cdiVersion":"0.5.0","kind":"a.com/b","devices":[{"name":"a","containerEdits":{"env":["NOEQUALS"]}}]}"#,
        ),
        (
            "twice",
            r#"{"cdiVersion":"0.5.0","kind":"a.com/b","devices":[{"name":"a"},{"name":"a"}]}"#,
        ),
    ];
    for (what, text) in bad {
        assert!(
            spec::parse(Path::new("x.json"), text).is_err(),
            "{what} should be refused"
        );
    }
}

#[test]
fn reading_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.yaml");
    std::fs::write(&big, vec![b'#'; spec::MAX_SPEC_BYTES as usize + 1]).unwrap();
    let err = spec::read(&big).unwrap_err().to_string();
    assert!(err.contains("larger than"), "{err}");
}

#[test]
fn an_unknown_device_lists_the_known_ones() {
    let dir = dir_with(&[("null.json", NULL_SPEC)]);
    let registry = Registry::load(&[dir.path().to_owned()]);
    let err = registry
        .resolve(&["example.com/null=three".into()])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("unknown CDI device example.com/null=three"),
        "{err}"
    );
    assert!(
        err.contains("known devices: example.com/null=one, example.com/null=two"),
        "{err}"
    );
    let err = registry.resolve(&["null".into()]).unwrap_err().to_string();
    assert!(err.contains("fully qualified"), "{err}");
}

#[test]
fn a_later_directory_overrides_and_one_directory_may_not_name_a_device_twice() {
    let other = NULL_SPEC.replace("WHICH=one", "WHICH=later");
    let (first, second) = (
        dir_with(&[("a.json", NULL_SPEC)]),
        dir_with(&[("b.json", &other)]),
    );
    let dirs: Vec<PathBuf> = vec![first.path().into(), second.path().into()];
    let registry = Registry::load(&dirs);
    let edits = registry.resolve(&["example.com/null=one".into()]).unwrap();
    assert_eq!(edits.env, ["FROM_SPEC=1", "WHICH=later"]);
    assert_eq!(
        registry.devices()[0].spec_file,
        second.path().join("b.json")
    );

    let both = dir_with(&[("a.json", NULL_SPEC), ("b.json", &other)]);
    let registry = Registry::load(&[both.path().to_owned()]);
    let err = registry
        .resolve(&["example.com/null=one".into()])
        .unwrap_err()
        .to_string();
    assert!(err.contains("defined by both"), "{err}");
}

#[test]
fn a_missing_directory_has_no_devices_and_defaults_apply_when_none_is_set() {
    let registry = Registry::load(&[PathBuf::from("/nonexistent/cdi")]);
    assert!(registry.devices().is_empty() && registry.errors().is_empty());
    assert_eq!(
        spec_dirs(&[]),
        [PathBuf::from("/etc/cdi"), PathBuf::from("/var/run/cdi")]
    );
}

fn base_config() -> serde_json::Value {
    json!({
        "process": {"env": ["PATH=/bin", "KEEP=1"]},
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
        "linux": {"resources": {"devices": [{"allow": false, "access": "rwm"}]}}
    })
}

fn sample_edits() -> Edits {
    Edits {
        env: vec!["PATH=/usr/bin".into(), "GPU=0".into()],
        device_nodes: vec![Node {
            path: "/dev/fuse".into(),
            host_path: "/dev/fuse".into(),
            kind: "c".into(),
            major: 10,
            minor: 229,
            file_mode: Some(0o666),
            permissions: "rw".into(),
            uid: None,
            gid: Some(5),
        }],
        mounts: vec![
            Mount {
                host_path: "/opt/lib".into(),
                container_path: "/usr/lib/x".into(),
                kind: None,
                options: vec!["ro".into()],
            },
            Mount {
                host_path: "/opt/dev".into(),
                container_path: "/opt/dev".into(),
                kind: Some("bind".into()),
                options: vec!["rbind".into(), "dev".into()],
            },
        ],
        hooks: vec![Hook {
            hook_name: "createContainer".into(),
            path: "/usr/bin/nvidia-cdi-hook".into(),
            args: vec!["nvidia-cdi-hook".into(), "update-ldcache".into()],
            env: vec![],
            timeout: Some(5),
        }],
    }
}

#[test]
fn edits_add_the_node_its_cgroup_rule_mounts_hooks_and_env() {
    let mut config = base_config();
    apply(&mut config, &sample_edits(), false);
    assert_eq!(
        config["process"]["env"],
        json!(["KEEP=1", "PATH=/usr/bin", "GPU=0"])
    );
    assert_eq!(
        config["linux"]["devices"],
        json!([{"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229,
                "fileMode": 0o666, "gid": 5}])
    );
    assert_eq!(
        config["linux"]["resources"]["devices"],
        json!([{"allow": false, "access": "rwm"},
               {"allow": true, "type": "c", "major": 10, "minor": 229, "access": "rw"}]),
        "deny-all stays first; the device is allowed after it"
    );
    let mounts = config["mounts"].as_array().unwrap();
    assert_eq!(mounts.len(), 3);
    assert_eq!(
        mounts[1],
        json!({"destination": "/usr/lib/x", "type": "bind", "source": "/opt/lib",
               "options": ["bind", "ro", "nosuid", "nodev"]})
    );
    assert_eq!(
        mounts[2]["options"],
        json!(["rbind", "dev", "nosuid"]),
        "the spec's dev is kept"
    );
    assert_eq!(
        config["hooks"]["createContainer"],
        json!([{"path": "/usr/bin/nvidia-cdi-hook",
                "args": ["nvidia-cdi-hook", "update-ldcache"], "timeout": 5}])
    );
}

#[test]
fn in_a_user_namespace_nodes_are_bind_mounted() {
    let mut edits = sample_edits();
    edits.device_nodes[0].host_path = "/dev/fuse-host".into();
    let mut config = base_config();
    apply(&mut config, &edits, true);
    assert!(config["linux"].get("devices").is_none());
    assert_eq!(
        config["mounts"][1],
        json!({"destination": "/dev/fuse", "type": "bind", "source": "/dev/fuse-host",
               "options": ["bind", "nosuid", "noexec"]})
    );
    assert_eq!(config["linux"]["resources"]["devices"][1]["minor"], 229);
}
