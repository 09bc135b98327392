//! `garrison serve` with its state directory on a small file system that
//! fills up: the running session keeps running (its claim renewed) and
//! ends normally, nothing new is claimed and Garrison says why (its log,
//! `/api/status`), it claims again by itself once space is freed, and the
//! state store comes out intact.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::*;
use emulator::Then;
use fleet::{Phase, SessionStatus};
use orchestrator::{Finish, Stage};
use serde_json::Value;

/// A tmpfs of a few MiB mounted for one test, unmounted on drop.
struct SmallFs {
    path: PathBuf,
}

impl SmallFs {
    fn mount(path: &Path, mib: u32) -> SmallFs {
        std::fs::create_dir_all(path).unwrap();
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={mib}m,mode=0700"),
                "tmpfs",
            ])
            .arg(path)
            .output()
            .expect("mount runs");
        assert!(
            out.status.success(),
            "mounting a tmpfs at {}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        SmallFs {
            path: path.to_owned(),
        }
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        // Lazy: a process the test left may still hold a file there.
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// Fills `dir`'s file system with one file, to the last byte it takes.
fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).unwrap();
    for chunk in [1 << 20, 4096, 1] {
        let bytes = vec![0u8; chunk];
        loop {
            match file.write_all(&bytes) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(e) => panic!("filling {}: {e}", path.display()),
            }
        }
    }
    path
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// The admin address from the `admin listening on http://...` log line.
async fn admin_url(g: &Garrison) -> String {
    const MARK: &str = "admin listening on http://";
    wait_until("the admin listener", Some(g), || g.log().contains(MARK)).await;
    let log = g.log();
    let rest = &log[log.find(MARK).unwrap() + MARK.len()..];
    let addr: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ':')
        .collect();
    format!("http://{addr}")
}

async fn api_status(base: &str) -> Value {
    let body = reqwest::get(format!("{base}/api/status"))
        .await
        .expect("/api/status answers")
        .text()
        .await
        .unwrap();
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// Polls `/api/status` until `check` holds of it, with the hang guard.
async fn wait_status(what: &str, g: &Garrison, base: &str, check: impl Fn(&Value) -> bool) {
    let deadline = tokio::time::Instant::now() + HANG_GUARD;
    loop {
        let status = api_status(base).await;
        if check(&status) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}: {status}\n--- garrison log ---\n{}",
            g.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_state_directory_claims_nothing_new_keeps_sessions_running_and_recovers() {
    if !nix_is_root() {
        eprintln!("skipped: mounting a small file system needs root");
        return;
    }
    // Short claims: the running session's claim must be renewed while the
    // disk is full, or it expires.
    let claim_ttl = Duration::from_secs(8);
    let emu = emulator_with(|c| c.claim_ttl = claim_ttl).await;
    let outpost = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    // The mount point is the state directory: Garrison's own log (beside
    // it) stays readable while the file system is full.
    let fs = SmallFs::mount(&dir.path().join("state"), 48);
    let state = fs.path.clone();
    let mut g = Garrison::start(
        &emu,
        GarrisonOptions {
            outpost: &outpost,
            state_dir: &state,
            extra_args: vec![
                "--state-dir-min-free-mb".into(),
                "8".into(),
                "--snapshot-dir".into(),
                dir.path().join("snapshots").display().to_string(),
            ],
        },
    );
    let base = admin_url(&g).await;

    // One session stays running through the full spell, one is ended in it.
    let kept = session(
        &emu,
        &outpost,
        vec![write("kept.txt", "written before the disk filled")],
        Then::Wait,
    );
    let ended = session(&emu, &outpost, vec![run("true")], Then::Wait);
    wait_until("both sessions running", Some(&g), || {
        view(&emu, &kept).steps_done == 1 && view(&emu, &ended).steps_done == 1
    })
    .await;
    wait_status("ready", &g, &base, |s| s["ready"] == true).await;

    let filler = fill(&state);
    wait_until("the shortage told", Some(&g), || {
        g.log().contains("no new session is claimed")
    })
    .await;
    let state_text = state.display().to_string();
    wait_status("not ready for want of room", &g, &base, |s| {
        s["ready"] == false
            && s["not_ready"]
                .as_str()
                .is_some_and(|why| why.contains(&state_text))
    })
    .await;

    let late = session(&emu, &outpost, vec![run("true")], Then::End);
    // Its remote is stopped at once; its wind-down is recorded as soon as
    // the store has room.
    emu.terminate(&ended).unwrap();
    // Past a claim's lifetime, with a claim round every second: a claim
    // not renewed meanwhile has expired, a new session been taken.
    tokio::time::sleep(claim_ttl + Duration::from_secs(4)).await;
    assert!(
        g.child.try_wait().unwrap().is_none(),
        "garrison exited on a full disk\n{}",
        g.log()
    );
    assert_eq!(
        view(&emu, &late).events("claimed").count(),
        0,
        "a session was claimed while the state directory was full\n{}",
        g.log()
    );
    let kept_now = view(&emu, &kept);
    let entry = kept_now.entry.expect("the entry is there");
    let deadline = entry
        .status
        .claim_deadline
        .map(|d| d.unix_millis())
        .unwrap_or(0);
    assert!(
        kept_now.connected && entry.status.phase == Phase::Claimed && deadline > now_ms(),
        "the running session was not kept running with its claim renewed: \
         connected {}, {entry:?}\n{}",
        kept_now.connected,
        g.log()
    );
    assert_eq!(
        g.log().matches("no new session is claimed").count(),
        1,
        "the shortage is told once, not every round\n{}",
        g.log()
    );

    std::fs::remove_file(&filler).unwrap();
    wait_until("the recovery told", Some(&g), || {
        g.log().contains("has room again")
    })
    .await;
    wait_until("the new session served", Some(&g), || {
        view(&emu, &late).steps_done == 1
    })
    .await;
    wait_status("ready again", &g, &base, |s| s["ready"] == true).await;
    emu.terminate(&kept).unwrap();
    let store = g.store();
    for id in [&ended, &kept] {
        wait_until(
            "the session ended, released and recorded as done",
            Some(&g),
            || {
                status_is(&emu, id, SessionStatus::Terminated)
                    && released(&emu, id)
                    && store.session(&sid(id)).unwrap().map(|s| s.stage)
                        == Some(Stage::Done(Finish::Terminated))
            },
        )
        .await;
    }
    assert!(g.child.try_wait().unwrap().is_none(), "{}", g.log());

    g.kill9();
    let db = rusqlite::Connection::open(state.join("garrison.db")).unwrap();
    let integrity: String = db
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(integrity, "ok");
    drop(g);
    drop(fs);
}
