//! Networking's pure parts: names, and the records it keeps.

use super::*;

#[test]
fn names_are_per_run_dir() {
    let name = SandboxName::for_session("s");
    let a = Paths::new(
        &NetConfig {
            run_dir: "/a".into(),
            dns_upstream: None,
        },
        name.as_str(),
    );
    let b = Paths::new(
        &NetConfig {
            run_dir: "/b".into(),
            dns_upstream: None,
        },
        name.as_str(),
    );
    assert_ne!(a.netns, b.netns);
    assert!(a.netns_name.starts_with(name.as_str()));
    assert_eq!(a.state_dir, Path::new("/a").join(name.as_str()));
}

/// The records as releases before formats wrote them, and as a newer
/// Garrison might.
fn write_both(dir: &Path, record: &str, newer: bool) -> (PathBuf, Vec<u8>) {
    let path = dir.join(record);
    let mut value: serde_json::Value = match record {
        STATE_FILE => serde_json::to_value(SandboxNet {
            name: "garrison-s".into(),
            netns_path: "/run/netns/garrison-s-1".into(),
            host_gateway: "10.213.0.1".parse().unwrap(),
            gateway_port: Some(8080),
            gateway_host: None,
            dns: None,
        })
        .unwrap(),
        _ => serde_json::to_value(common::NetworkPolicy {
            enabled: false,
            allow: Vec::new(),
        })
        .unwrap(),
    };
    if newer {
        value["format"] = 999.into();
    }
    let bytes = serde_json::to_vec(&value).unwrap();
    std::fs::write(&path, &bytes).unwrap();
    (path, bytes)
}

#[test]
fn records_without_a_format_read_and_newer_ones_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    write_both(dir.path(), STATE_FILE, false);
    let net = read_record(&dir.path().join(STATE_FILE)).unwrap().unwrap();
    assert_eq!(net.gateway_port, Some(8080));
    write_both(dir.path(), POLICY_FILE, false);
    let policy = read_policy(&dir.path().join(POLICY_FILE)).unwrap();
    assert!(!policy.enabled);

    for record in [STATE_FILE, POLICY_FILE] {
        let (path, bytes) = write_both(dir.path(), record, true);
        let err = match record {
            STATE_FILE => read_record(&path).unwrap_err(),
            _ => read_policy(&path).unwrap_err(),
        };
        let message = format!("{err:#}");
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert!(message.contains("a newer Garrison wrote it"), "{message}");
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
    }
}
