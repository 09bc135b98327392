//! `garrison serve` keeping snapshots in a real S3-compatible server
//! (moto, started by the test on loopback): two Garrisons sharing only the
//! bucket hand a session over, encrypted at rest; a damaged snapshot fails
//! the session and is kept, or starts it fresh when the operator allows;
//! another Garrison collects old snapshots it never recorded; `garrison
//! doctor` probes the store.

use crate::bucket;
use crate::bucket::Bucket;
use crate::common::*;
use emulator::{Script, Then};
use fleet::SessionStatus;
use object_store::ObjectStore;
use object_store::path::Path as ObjectPath;
use orchestrator::{Finish, Stage};

const MARKER: &str = "garrison-e2e-plaintext-4d2b7e";

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// What every test here starts from: a bucket, the emulator, an outpost
/// and a directory for the Garrisons' state.
struct World {
    bucket: Bucket,
    emu: emulator::Emulator,
    outpost: String,
    dir: tempfile::TempDir,
}

impl World {
    /// `None` (the test skips) without the S3 server.
    async fn start() -> Option<World> {
        let bucket = Bucket::start()?;
        let emu = emulator().await;
        let outpost = outpost(&emu);
        Some(World {
            bucket,
            emu,
            outpost,
            dir: tempfile::tempdir().unwrap(),
        })
    }

    /// A Garrison on the host backend keeping its snapshots in the bucket,
    /// its state in `<dir>/<name>`.
    fn garrison(
        &self,
        name: &str,
        extra_args: Vec<String>,
        extra_env: Vec<(String, String)>,
    ) -> Garrison {
        let mut args = self.bucket.serve_args();
        args.extend(extra_args);
        let mut env = self.bucket.env();
        env.extend(extra_env);
        Garrison::start_on_with_env(
            &self.emu,
            GarrisonOptions {
                outpost: &self.outpost,
                state_dir: &self.dir.path().join(name),
                extra_args: args,
            },
            Backend::Host,
            env,
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garrisons_sharing_only_a_bucket_hand_a_session_over_encrypted() {
    let Some(w) = World::start().await else {
        return;
    };
    let World {
        bucket,
        emu,
        outpost,
        ..
    } = &w;
    let key = "5a".repeat(32);
    let with_key = || vec![("GARRISON_SNAPSHOT_KEY".to_owned(), key.clone())];

    let a = w.garrison("a", vec![], with_key());
    let id = session(
        emu,
        outpost,
        vec![write("handoff.txt", MARKER)],
        Then::Sleep,
    );
    wait_until("suspended and released", Some(&a), || {
        status_is(emu, &id, SessionStatus::Suspended) && released(emu, &id)
    })
    .await;
    let log_a = a.log();
    drop(a);

    let archives = bucket.archives().await;
    assert_eq!(archives.len(), 1, "one snapshot in the bucket");
    for (path, bytes) in bucket.objects().await {
        assert!(
            !contains(&bytes, MARKER.as_bytes()),
            "{path} holds plaintext"
        );
    }
    // Nothing was left on A's disk to share: the bucket is all B has.
    let b = w.garrison("b", vec![], with_key());
    emu.resume(
        &id,
        Script {
            steps: vec![run("cat handoff.txt")],
            then: Then::End,
        },
    )
    .unwrap();
    wait_until("resumed and terminated", Some(&b), || {
        status_is(emu, &id, SessionStatus::Terminated) && released(emu, &id)
    })
    .await;
    assert_eq!(step_outputs(emu, &id).last().unwrap(), MARKER);
    for log in [log_a, b.log()] {
        assert!(!log.contains(&key), "the snapshot key leaked into a log");
        assert!(
            !log.contains(bucket::SECRET_KEY),
            "the S3 secret leaked into a log"
        );
        assert!(log.contains(&bucket.url()), "the store is named in the log");
    }
}

/// Suspends a session under `g`, then damages its snapshot in the bucket.
async fn suspend_and_damage(
    emu: &emulator::Emulator,
    outpost: &str,
    g: &Garrison,
    bucket: &Bucket,
) -> (String, ObjectPath) {
    let id = session(emu, outpost, vec![write("work.txt", "kept")], Then::Sleep);
    wait_until("suspended and released", Some(g), || {
        status_is(emu, &id, SessionStatus::Suspended) && released(emu, &id)
    })
    .await;
    let (path, mut bytes) = bucket.archives().await.pop().expect("the snapshot");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x55;
    bucket.raw().put(&path, bytes.into()).await.unwrap();
    emu.resume(
        &id,
        Script {
            steps: vec![run("cat work.txt 2>&1; echo fresh")],
            then: Then::End,
        },
    )
    .unwrap();
    (id, path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_snapshot_fails_the_session_and_is_kept() {
    let Some(w) = World::start().await else {
        return;
    };
    let World {
        bucket,
        emu,
        outpost,
        ..
    } = &w;
    let g = w.garrison("g", vec![], vec![]);
    let (id, path) = suspend_and_damage(emu, outpost, &g, bucket).await;

    let store = g.store();
    wait_until("the session failed", Some(&g), || {
        store
            .session(&sid(&id))
            .unwrap()
            .is_some_and(|s| s.stage == Stage::Done(Finish::Failed))
    })
    .await;
    let record = store.session(&sid(&id)).unwrap().unwrap();
    let error = record.error.unwrap_or_default();
    assert!(error.contains("failed its integrity check"), "{error}");
    let events = store.events(&sid(&id), 0).unwrap();
    assert!(
        events.iter().any(|e| e.kind == "snapshot_refused"),
        "{events:?}"
    );
    assert!(
        bucket.raw().head(&path).await.is_ok(),
        "the damaged snapshot was kept"
    );
    assert!(step_outputs(emu, &id).iter().all(|o| !o.contains("fresh")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_fresh_fallback_a_damaged_snapshot_starts_the_session_afresh() {
    let Some(w) = World::start().await else {
        return;
    };
    let World {
        bucket,
        emu,
        outpost,
        ..
    } = &w;
    let fallback = vec![
        "--snapshot-integrity-fallback".to_owned(),
        "fresh".to_owned(),
    ];
    let g = w.garrison("g", fallback, vec![]);
    let (id, _) = suspend_and_damage(emu, outpost, &g, bucket).await;

    wait_until("resumed fresh and terminated", Some(&g), || {
        status_is(emu, &id, SessionStatus::Terminated) && released(emu, &id)
    })
    .await;
    let output = step_outputs(emu, &id).last().unwrap().clone();
    assert!(
        output.contains("fresh") && !output.contains("kept"),
        "{output}"
    );
    let events = g.store().events(&sid(&id), 0).unwrap();
    assert!(
        events.iter().any(|e| e.kind == "snapshot_refused"),
        "{events:?}"
    );
    assert!(g.log().contains("failed its integrity check"));
}

async fn doctor(bucket: &Bucket, endpoint: &str, dir: &std::path::Path) -> std::process::Output {
    let emu = emulator().await;
    let outpost = outpost(&emu);
    let mut cmd = tokio::process::Command::new(garrison_bin());
    cmd.args([
        "doctor",
        "--api-url",
        &emu.base_url(),
        "--outpost",
        &outpost,
    ])
    .arg("--state-dir")
    .arg(dir.join("state"))
    .args(["--backend", "host", "--snapshot-store", &bucket.url()])
    .env_clear()
    .env("PATH", std::env::var("PATH").unwrap_or_default())
    .env("HOME", dir)
    .env("GARRISON_CONFIG", dir.join("config"))
    .env("DEVIN_OUTPOSTS_TOKEN", emu.account_token())
    .envs(bucket.env())
    .env("AWS_ENDPOINT_URL", endpoint);
    cmd.output().await.expect("garrison doctor runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_probes_the_store_and_names_the_failing_step() {
    let Some(bucket) = Bucket::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = doctor(&bucket, &bucket.server.endpoint, dir.path()).await;
    let text = String::from_utf8_lossy(&out.stdout);
    for step in ["write a probe object", "read it back", "delete it"] {
        assert!(text.contains(&format!("✓ {step}: ok")), "{text}");
    }
    assert!(
        text.contains(&format!("Snapshot store {}", bucket.url())),
        "{text}"
    );
    assert!(text.contains("! encryption: off"), "{text}");
    assert!(
        bucket.objects().await.is_empty(),
        "the probe object was left behind"
    );

    // Nothing listens on the port a closed listener had.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_endpoint = format!("http://{}", dead.local_addr().unwrap());
    drop(dead);
    let out = doctor(&bucket, &dead_endpoint, dir.path()).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("✗ write a probe object"), "{text}");
    assert!(!text.contains("read it back"), "{text}");
    assert!(!out.status.success());
    assert!(!text.contains(bucket::SECRET_KEY), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_garrison_sharing_the_bucket_collects_old_snapshots_it_never_recorded() {
    let Some(w) = World::start().await else {
        return;
    };
    let World {
        bucket,
        emu,
        outpost,
        ..
    } = &w;
    let a = w.garrison("a", vec![], vec![]);
    let id = session(emu, outpost, vec![write("old.txt", "x")], Then::Sleep);
    wait_until("suspended and released", Some(&a), || {
        status_is(emu, &id, SessionStatus::Suspended) && released(emu, &id)
    })
    .await;
    drop(a);
    assert_eq!(bucket.archives().await.len(), 1);
    // Older than B's retention by the time B looks (the store's clock
    // stamps objects to the second).
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;

    let retention = vec!["--snapshot-retention".to_owned(), "1s".to_owned()];
    let b = w.garrison("b", retention, vec![]);
    // The sweep logs the collection once the objects are gone: wait for
    // both, not for the empty bucket alone.
    let deadline = tokio::time::Instant::now() + HANG_GUARD;
    while !(bucket.objects().await.is_empty() && b.log().contains("collected an old snapshot")) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "B never collected A's snapshot (or never said so)\n{}",
            b.log()
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}
