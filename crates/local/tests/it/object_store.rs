//! The local backend keeping its snapshots in a real S3-compatible server
//! (moto): the conformance suite's snapshot checks, encrypted and not, and
//! a restore on another host that shares only the bucket. Needs root and
//! the test image, as every local test (see `support`).

use std::sync::Arc;

use crate::support::config;
use local::{LocalBackend, LocalConfig};
use sandbox::conformance::Harness;
use sandbox::{ObjectStoreSettings, S3Server, SnapshotKey};

fn with_store(server: &S3Server, bucket: &str, key: Option<&SnapshotKey>) -> Option<LocalConfig> {
    Some(LocalConfig {
        snapshot_store: Some(ObjectStoreSettings {
            options: server.options(),
            key: key.cloned(),
            ..ObjectStoreSettings::new(format!("s3://{bucket}/garrison").parse().unwrap())
        }),
        ..config()?
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn the_conformance_snapshot_checks_pass_with_s3() {
    if crate::support::environment().is_none() {
        return;
    }
    let Some(server) = S3Server::start("127.0.0.1") else {
        return;
    };
    let bucket = format!("local-{:08x}", rand::random::<u32>());
    server.create_bucket(&bucket);
    let key = SnapshotKey::from_hex(&"3c".repeat(32)).unwrap();
    for key in [None, Some(&key)] {
        let config = with_store(&server, &bucket, key).unwrap();
        // Another host: its own directories, the same bucket.
        let other = with_store(&server, &bucket, key).unwrap();
        let h = Harness {
            backend: Arc::new(LocalBackend::new(config).unwrap()),
            reopen: Box::new(move || Arc::new(LocalBackend::new(other.clone()).unwrap())),
            image: None,
            finds_snapshots_by_name: true,
        };
        sandbox::conformance::snapshot_restores_the_workspace(&h)
            .await
            .unwrap();
        sandbox::conformance::restore_from_a_missing_snapshot_is_gone(&h)
            .await
            .unwrap();
    }
}
