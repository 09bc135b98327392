//! The host backend keeping snapshots in a real S3-compatible server (moto,
//! see `s3_support`): the conformance suite's snapshot checks, multipart
//! archives, encryption at rest, integrity checks, and collection across
//! hosts with leases.

use std::path::PathBuf;
use std::sync::Arc;

use futures::TryStreamExt;
use host::{HostBackend, HostConfig};
use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use sandbox::conformance::Harness;
use sandbox::{
    ObjectStoreSettings, PART_SIZE, S3Server, Sandbox, SandboxName, SandboxSpec, SnapshotKey,
    SnapshotStore,
};

const MARKER: &str = "garrison-plaintext-marker-7f3a9c";

struct Bucket {
    server: S3Server,
    name: String,
}

impl Bucket {
    fn start() -> Option<Self> {
        let server = S3Server::start("127.0.0.1")?;
        let name = format!("snapshots-{:08x}", rand::random::<u32>());
        server.create_bucket(&name);
        Some(Self { server, name })
    }

    fn settings(&self, key: Option<&SnapshotKey>) -> ObjectStoreSettings {
        ObjectStoreSettings {
            options: self.server.options(),
            key: key.cloned(),
            ..ObjectStoreSettings::new(format!("s3://{}/garrison", self.name).parse().unwrap())
        }
    }

    /// A Garrison host of its own (own directories) sharing the bucket.
    fn host(&self, key: Option<&SnapshotKey>) -> HostConfig {
        let root: PathBuf = tempfile::tempdir().unwrap().keep();
        HostConfig {
            root: root.join("host"),
            snapshot_dir: root.join("spool"),
            snapshot_store: Some(self.settings(key)),
            shim_exe: PathBuf::from(env!("CARGO_BIN_EXE_host-test-shim")),
        }
    }

    fn raw(&self) -> Arc<dyn ObjectStore> {
        let mut builder = AmazonS3Builder::new().with_bucket_name(&self.name);
        for (key, value) in self.server.options() {
            builder = builder.with_config(key.parse().unwrap(), value);
        }
        Arc::new(builder.build().unwrap())
    }

    /// Every object in the bucket, with its bytes.
    async fn objects(&self) -> Vec<(ObjectPath, Vec<u8>)> {
        let raw = self.raw();
        let listed: Vec<_> = raw.list(None).try_collect().await.unwrap();
        let mut objects = Vec::new();
        for meta in listed {
            let bytes = raw
                .get(&meta.location)
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap();
            objects.push((meta.location, bytes.to_vec()));
        }
        objects
    }

    async fn archive_of(&self, id: &str) -> (ObjectPath, Vec<u8>) {
        self.objects()
            .await
            .into_iter()
            .find(|(path, _)| path.as_ref().ends_with(&format!("{id}.tar.zst")))
            .expect("the archive object")
    }
}

fn key(byte: u8) -> SnapshotKey {
    SnapshotKey::from_hex(&format!("{byte:02x}").repeat(32)).unwrap()
}

fn spec(label: &str) -> SandboxSpec {
    let session = format!("s3-{label}-{:08x}", rand::random::<u32>());
    SandboxSpec {
        name: SandboxName::for_session(&session),
        labels: sandbox::session_labels(&session, "outpost_s3"),
        image: None,
        restore_from: None,
        resources: Default::default(),
        network: Default::default(),
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_conformance_snapshot_checks_pass_with_s3() {
    let Some(bucket) = Bucket::start() else {
        return;
    };
    for key in [None, Some(key(1))] {
        let config = bucket.host(key.as_ref());
        let reopen = bucket.host(key.as_ref());
        let h = Harness {
            backend: Arc::new(HostBackend::new(config).unwrap()),
            reopen: Box::new(move || Arc::new(HostBackend::new(reopen.clone()).unwrap())),
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

#[tokio::test(flavor = "multi_thread")]
async fn multipart_archives_are_sealed_at_rest_and_restore_on_another_host() {
    let Some(bucket) = Bucket::start() else {
        return;
    };
    let k = key(7);
    let a = HostBackend::new(bucket.host(Some(&k))).unwrap();
    let spec = spec("multipart");
    let made = a.create(&spec).await.unwrap();
    // Incompressible, so the archive spans several parts.
    let big: Vec<u8> = (0..PART_SIZE * 2 + 12345).map(|_| rand::random()).collect();
    a.put_file(&made, &format!("{}/big.bin", made.workdir), &big, 0o644)
        .await
        .unwrap();
    a.put_file(
        &made,
        &format!("{}/notes.txt", made.workdir),
        MARKER.as_bytes(),
        0o644,
    )
    .await
    .unwrap();
    let snapshot = a.snapshot(&made).await.unwrap();
    a.destroy(&made).await.unwrap();
    assert!(snapshot.sha256.is_some());
    assert!(snapshot.size_bytes > 2 * PART_SIZE as u64);

    let objects = bucket.objects().await;
    assert!(
        objects.len() >= 2,
        "{:?}",
        objects.iter().map(|o| &o.0).collect::<Vec<_>>()
    );
    for (path, bytes) in &objects {
        assert!(
            !contains(bytes, MARKER.as_bytes()),
            "{path} holds plaintext"
        );
    }
    let (_, archive) = bucket.archive_of(&snapshot.id).await;
    assert!(archive.len() > 2 * PART_SIZE);

    // Another host with the key finds it by name and restores it.
    let b = HostBackend::new(bucket.host(Some(&k))).unwrap();
    let found = b.snapshots_for(&spec.name).await.unwrap();
    assert_eq!(found, vec![snapshot.clone()]);
    let restored = b
        .create(&SandboxSpec {
            restore_from: Some(snapshot.clone()),
            ..spec.clone()
        })
        .await
        .unwrap();
    let workspace = PathBuf::from(&restored.workdir);
    assert!(std::fs::read(workspace.join("big.bin")).unwrap() == big);
    assert_eq!(
        std::fs::read_to_string(workspace.join("notes.txt")).unwrap(),
        MARKER
    );
    b.destroy(&restored).await.unwrap();

    // A wrong key, or none, is refused in plain words; the object stays.
    for (other, words) in [
        (Some(key(8)), "wrong snapshot key"),
        (None, "no snapshot key is set"),
    ] {
        let c = HostBackend::new(bucket.host(other.as_ref())).unwrap();
        let error = c
            .create(&SandboxSpec {
                restore_from: Some(snapshot.clone()),
                ..spec.clone()
            })
            .await
            .unwrap_err();
        assert!(error.is_corrupt(), "{error}");
        assert!(error.to_string().contains(words), "{error}");
        assert!(c.snapshot_exists(&snapshot).await.unwrap());
        assert!(
            c.list().await.unwrap().is_empty(),
            "a refused restore left a sandbox"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_key_objects_are_plain_and_a_damaged_one_is_refused_and_kept() {
    let Some(bucket) = Bucket::start() else {
        return;
    };
    let a = HostBackend::new(bucket.host(None)).unwrap();
    let spec = spec("damaged");
    let made = a.create(&spec).await.unwrap();
    a.put_file(
        &made,
        &format!("{}/notes.txt", made.workdir),
        MARKER.as_bytes(),
        0o644,
    )
    .await
    .unwrap();
    let snapshot = a.snapshot(&made).await.unwrap();
    a.destroy(&made).await.unwrap();
    let (path, mut archive) = bucket.archive_of(&snapshot.id).await;
    // Without a key the object is the archive itself: the control for the
    // test above.
    let tar = zstd::decode_all(archive.as_slice()).unwrap();
    assert!(contains(&tar, MARKER.as_bytes()));

    let last = archive.len() - 1;
    archive[last] ^= 0xff;
    bucket.raw().put(&path, archive.into()).await.unwrap();
    let error = a
        .create(&SandboxSpec {
            restore_from: Some(snapshot.clone()),
            ..spec.clone()
        })
        .await
        .unwrap_err();
    assert!(error.is_corrupt(), "{error}");
    let message = error.to_string();
    assert!(
        message.contains("failed its integrity check") && message.contains(&snapshot.id),
        "{message}"
    );
    assert!(
        a.snapshot_exists(&snapshot).await.unwrap(),
        "the damaged object was not kept"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn any_host_collects_old_snapshots_but_never_a_leased_one() {
    let Some(bucket) = Bucket::start() else {
        return;
    };
    let a = HostBackend::new(bucket.host(None)).unwrap();
    let collector = HostBackend::new(bucket.host(None)).unwrap();
    let mut snapshots = Vec::new();
    for label in ["leased", "free"] {
        let spec = spec(label);
        let made = a.create(&spec).await.unwrap();
        snapshots.push(a.snapshot(&made).await.unwrap());
        a.destroy(&made).await.unwrap();
    }
    let (leased, free) = (&snapshots[0], &snapshots[1]);
    let now = chrono::Utc::now().timestamp_millis();

    // Young snapshots stay, whoever looks.
    assert!(
        collector
            .collect_snapshots_older_than(now - 3_600_000)
            .await
            .unwrap()
            .is_empty()
    );

    // A restore on a third host holds a lease while it reads.
    let reader_config = bucket.host(None);
    let reader = SnapshotStore::open(
        reader_config.snapshot_dir.clone(),
        reader_config.snapshot_store.as_ref(),
        "host",
    )
    .unwrap();
    std::fs::create_dir_all(&reader_config.snapshot_dir).unwrap();
    let fetched = reader.fetch(leased).await.unwrap();

    // Everything is old by this cutoff: only the lease saves one.
    let cutoff = now + 60_000;
    let collected = collector
        .collect_snapshots_older_than(cutoff)
        .await
        .unwrap();
    assert_eq!(collected, vec![free.clone()]);
    assert!(collector.snapshot_exists(leased).await.unwrap());
    assert!(!collector.snapshot_exists(free).await.unwrap());
    assert!(fetched.path().exists());

    fetched.release().await;
    let collected = collector
        .collect_snapshots_older_than(cutoff)
        .await
        .unwrap();
    assert_eq!(collected, vec![leased.clone()]);
    // Nothing is left behind: no archive, manifest, lease or tombstone.
    assert!(bucket.objects().await.is_empty());
}

/// Deleting a snapshot (its session ended) removes every lease on it too:
/// a restore whose lease release was cut off (a store cut, a kill) leaves
/// one behind, which nothing else would ever remove.
#[tokio::test(flavor = "multi_thread")]
async fn deleting_a_snapshot_removes_the_leases_left_on_it() {
    let Some(bucket) = Bucket::start() else {
        return;
    };
    let a = HostBackend::new(bucket.host(None)).unwrap();
    let made = a.create(&spec("lease-left")).await.unwrap();
    let snapshot = a.snapshot(&made).await.unwrap();
    a.destroy(&made).await.unwrap();
    let lease = ObjectPath::from(format!(
        "garrison/host/leases/{}/a-reader-that-died",
        snapshot.id
    ));
    bucket
        .raw()
        .put(&lease, b"1".to_vec().into())
        .await
        .unwrap();

    a.delete_snapshot(&snapshot).await.unwrap();
    let left: Vec<_> = bucket.objects().await.into_iter().map(|(p, _)| p).collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
