//! `REPOS`, `GIT_USERNAME` and `GIT_TOKEN` end to end: the real binary, the
//! emulator, the remote simulator and the host backend. Repositories are
//! cloned into a fresh sandbox before the remote's first step, not again on
//! a resume, and the git token reaches nothing but the clone command: not
//! the remote's environment, not a file in the sandbox, not the state
//! directory, not Garrison's log.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::*;
use emulator::{Emulator, Script, Then};
use fleet::SessionStatus;
use orchestrator::{Finish, Stage};

const COMMIT_MESSAGE: &str = "the-first-commit-of-the-fixture";

/// A bare repository with one commit, made with the git CLI: `<dir>/repo.git`.
fn bare_repo(dir: &Path) -> PathBuf {
    let work = dir.join("work");
    let bare = dir.join("repo.git");
    git(dir, &["init", "-q", "-b", "main", work.to_str().unwrap()]);
    std::fs::write(work.join("README"), "fixture\n").unwrap();
    git(&work, &["add", "README"]);
    git(
        &work,
        &[
            "-c",
            "user.name=Test",
            "-c",
            "user.email=test@example.com",
            "commit",
            "-q",
            "-m",
            COMMIT_MESSAGE,
        ],
    );
    git(
        dir,
        &[
            "clone",
            "-q",
            "--bare",
            work.to_str().unwrap(),
            bare.to_str().unwrap(),
        ],
    );
    bare
}

fn git(cwd: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(args)
        .current_dir(cwd)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("git is installed");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `garrison serve` on the host backend with `REPOS` and the git
/// credentials in its environment.
fn start(emu: &Emulator, outpost: &str, state: &Path, repos: &str, token: &str) -> Garrison {
    let args = [
        "serve",
        "--outpost",
        outpost,
        "--api-url",
        &emu.base_url(),
        "--static-base-url",
        &emu.static_base_url(),
        "--state-dir",
        state.to_str().unwrap(),
        "--backend",
        "host",
        "--listen",
        "127.0.0.1:0",
    ]
    .map(str::to_owned)
    .to_vec();
    let env = [
        ("REPOS", repos),
        ("GIT_USERNAME", "u"),
        ("GIT_TOKEN", token),
    ]
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .to_vec();
    Garrison::start_with_args_and_env(emu, state, args, env)
}

fn random_token() -> String {
    format!("gtok_{:032x}", rand::random::<u128>())
}

fn event_kinds(g: &Garrison, id: &str) -> Vec<String> {
    g.store()
        .events(&sid(id), 0)
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repos_are_cloned_before_the_remote_and_the_token_goes_nowhere() {
    let emu = emulator().await;
    let outpost = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let repo = bare_repo(dir.path());
    let state = dir.path().join("state");
    let token = random_token();
    let url = format!("file://{}", repo.display());
    let g = start(&emu, &outpost, &state, &url, &token);

    let id = session(
        &emu,
        &outpost,
        vec![
            run(
                "pwd; ls; echo --; case \"$DEVIN_REMOTE_STATE_DIR/\" in \"$PWD\"/*) echo state-inside;; *) echo state-outside;; esac",
            ),
            run("git -C repo log --oneline"),
            run("cat repo/.git/config"),
            run("env; cat /proc/self/environ | tr '\\0' '\\n'"),
        ],
        Then::Wait,
    );
    wait_until("the four steps ran", Some(&g), || {
        step_outputs(&emu, &id).len() == 4
    })
    .await;
    let outputs = step_outputs(&emu, &id);
    // Devin's reference: "launch the remote from the directory containing
    // the session's repositories". Each is a direct child of the remote's
    // working directory (the sandbox's workdir), nothing else beside them,
    // and the remote's state directory is not in there.
    let words: Vec<&str> = outputs[0].split_whitespace().collect();
    assert!(
        words[0].ends_with("/workspace"),
        "the remote runs in the workdir: {outputs:?}"
    );
    assert_eq!(
        words[1..],
        ["repo", "--", "state-outside"],
        "the repositories, then where the state directory is: {outputs:?}"
    );
    assert!(outputs[1].contains(COMMIT_MESSAGE), "{outputs:?}");
    assert!(outputs[2].contains(&url), "origin is the URL: {outputs:?}");
    assert!(!outputs[2].contains("credential"), "{outputs:?}");
    for output in &outputs {
        assert!(!output.contains(&token), "the token reached the remote");
    }
    assert!(!outputs[3].contains("GIT_TOKEN") && !outputs[3].contains("GIT_USERNAME"));

    // Cloned before the remote started, once. (`remote_started` is written
    // once the spawn returns, which can be after the remote's first steps.)
    wait_until("the start recorded", Some(&g), || {
        event_kinds(&g, &id).iter().any(|k| k == "remote_started")
    })
    .await;
    let kinds = event_kinds(&g, &id);
    let cloned = kinds.iter().position(|k| k == "repo_cloned");
    let started = kinds.iter().position(|k| k == "remote_started");
    assert!(
        cloned.is_some() && cloned < started,
        "repo_cloned before remote_started: {kinds:?}"
    );
    let detail = &g
        .store()
        .events(&sid(&id), 0)
        .unwrap()
        .into_iter()
        .find(|e| e.kind == "repo_cloned")
        .unwrap()
        .detail;
    assert_eq!(detail["url"], url.as_str());
    assert_eq!(detail["dir"], "repo");
    // The host's first use of the repository: its mirror was cloned (the
    // token check below covers the mirror too, under the state directory).
    assert_eq!(detail["mirror"], "cloned");
    assert!(state.join("repo-mirrors").is_dir());

    // While the session runs: not in any file of the sandbox (its workspace,
    // home, state, the clone process's directory), the state directory or
    // the log.
    let sandboxes = state.join("host").join("sandboxes");
    assert_eq!(sandbox_dirs(&state), 1);
    let hits = grep_tree(&state, token.as_bytes());
    assert!(hits.is_empty(), "the git token was written to {hits:?}");
    assert!(grep_tree(&sandboxes, b"gtok_").is_empty());
    assert!(!g.log().contains(&token), "the git token is in the log");

    // Suspended: the snapshot holds the clone and not the token.
    emu.suspend(&id).unwrap();
    wait_until("suspended and released", Some(&g), || {
        status_is(&emu, &id, SessionStatus::Suspended) && released(&emu, &id)
    })
    .await;
    wait_until("sandbox destroyed after snapshot", Some(&g), || {
        sandbox_dirs(&state) == 0
    })
    .await;
    let hits = grep_tree(&state, token.as_bytes());
    assert!(hits.is_empty(), "the git token was written to {hits:?}");
    // Devin told the remote to sleep and it exited by itself: no kill.
    let kinds = event_kinds(&g, &id);
    assert!(
        kinds.iter().any(|k| k == "remote_exited_by_itself"),
        "{kinds:?}"
    );
    assert!(
        !kinds.iter().any(|k| k.starts_with("remote_kill")),
        "{kinds:?}"
    );

    // Resumed from the snapshot: the repository is there, not cloned again.
    emu.resume(
        &id,
        Script {
            steps: vec![run("git -C repo log --oneline && ls")],
            then: Then::End,
        },
    )
    .unwrap();
    wait_until("resumed session terminated", Some(&g), || {
        status_is(&emu, &id, SessionStatus::Terminated) && released(&emu, &id)
    })
    .await;
    let outputs = step_outputs(&emu, &id);
    let last = outputs.last().unwrap();
    assert!(
        last.contains(COMMIT_MESSAGE) && !last.contains("repo-2"),
        "{outputs:?}"
    );
    let kinds = event_kinds(&g, &id);
    assert_eq!(
        kinds.iter().filter(|k| *k == "repo_cloned").count(),
        1,
        "cloned once: {kinds:?}"
    );
    assert_eq!(kinds.iter().filter(|k| *k == "remote_started").count(), 2);
    assert!(kinds.iter().any(|k| k == "restored"), "{kinds:?}");
    assert!(grep_tree(&state, token.as_bytes()).is_empty());
    assert!(!g.log().contains(&token));
}

/// A snapshot made when Garrison cloned into `repos/<name>` below the
/// workdir (and started the remote in the workdir) still restores, and the
/// remote resumes in `repos/`, whose direct children are the repositories.
/// The old layout is made by the session itself before it is suspended, so
/// the snapshot is exactly what an older Garrison left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_layout_snapshot_resumes_with_the_remote_in_repos() {
    let emu = emulator().await;
    let outpost = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let repo = bare_repo(dir.path());
    let state = dir.path().join("state");
    let url = format!("file://{}", repo.display());
    let g = start(&emu, &outpost, &state, &url, &random_token());

    let id = session(
        &emu,
        &outpost,
        vec![run("mkdir repos && mv repo repos/ && ls repos")],
        Then::Wait,
    );
    wait_until("the old layout made", Some(&g), || {
        step_outputs(&emu, &id).len() == 1
    })
    .await;
    assert_eq!(step_outputs(&emu, &id)[0].trim(), "repo");
    emu.suspend(&id).unwrap();
    wait_until("suspended and released", Some(&g), || {
        status_is(&emu, &id, SessionStatus::Suspended) && released(&emu, &id)
    })
    .await;
    wait_until("sandbox destroyed after snapshot", Some(&g), || {
        sandbox_dirs(&state) == 0
    })
    .await;

    emu.resume(
        &id,
        Script {
            steps: vec![run("pwd; ls; git -C repo log --oneline")],
            then: Then::End,
        },
    )
    .unwrap();
    wait_until("resumed session terminated", Some(&g), || {
        status_is(&emu, &id, SessionStatus::Terminated) && released(&emu, &id)
    })
    .await;
    let outputs = step_outputs(&emu, &id);
    let mut last = outputs.last().unwrap().lines();
    assert!(
        last.next().unwrap().ends_with("/workspace/repos"),
        "the remote resumed in repos/: {outputs:?}"
    );
    assert_eq!(last.next(), Some("repo"), "{outputs:?}");
    assert!(last.next().unwrap().contains(COMMIT_MESSAGE), "{outputs:?}");
    let kinds = event_kinds(&g, &id);
    assert!(kinds.iter().any(|k| k == "restored"), "{kinds:?}");
    assert!(kinds.iter().any(|k| k == "legacy_layout"), "{kinds:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_clone_fails_the_start_and_releases_the_claim() {
    let emu = emulator().await;
    let outpost = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let token = random_token();
    let g = start(
        &emu,
        &outpost,
        &state,
        "file:///nonexistent/garrison-test/repo.git",
        &token,
    );

    let id = session(&emu, &outpost, vec![run("true")], Then::End);
    wait_until("released after the failed starts", Some(&g), || {
        released(&emu, &id)
            && g.store()
                .session(&sid(&id))
                .unwrap()
                .is_some_and(|r| r.stage == Stage::Done(Finish::Released))
    })
    .await;
    let rec = g.store().session(&sid(&id)).unwrap().unwrap();
    assert!(rec.start_failures >= 1);
    let error = rec.error.unwrap_or_default();
    assert!(
        error.contains("cloning file:///nonexistent/garrison-test/repo.git into repo failed"),
        "{error}"
    );
    assert!(!error.contains(&token));
    let events = g.store().events(&sid(&id), 0).unwrap();
    assert!(events.iter().any(|e| e.kind == "start_failed"));
    assert!(!events.iter().any(|e| e.kind == "remote_started"));
    assert_eq!(view(&emu, &id).connections, 0, "no remote ran");
    wait_until("sandbox destroyed", Some(&g), || sandbox_dirs(&state) == 0).await;
    assert!(grep_tree(&state, token.as_bytes()).is_empty());
    assert!(!g.log().contains(&token));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_with_credentials_stops_garrison_at_start_without_echoing_them() {
    let emu = emulator().await;
    let outpost = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut g = start(
        &emu,
        &outpost,
        &state,
        "https://ada:hunter2-in-the-url@github.com/o/r.git",
        &random_token(),
    );
    let status = g.child.wait().unwrap();
    assert!(!status.success());
    let log = g.log();
    assert!(log.contains("REPOS (environment)"), "{log}");
    assert!(log.contains("GIT_TOKEN"), "{log}");
    assert!(!log.contains("hunter2"), "{log}");
}

/// The agent, root in a real local sandbox, looks everywhere the token
/// used to be (the clone process's spawn request and environment, any
/// file): the clone is made on Garrison's side, so it is nowhere inside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_git_token_never_enters_a_local_sandbox() {
    for backend in [Backend::Local, Backend::LocalRunsc] {
        if backend.available() {
            git_token_never_enters(backend).await;
        }
    }
}

async fn git_token_never_enters(backend: Backend) {
    let emu = emulator().await;
    let outpost = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let repo = bare_repo(dir.path());
    let state = dir.path().join("state");
    let token = random_token();
    let url = format!("file://{}", repo.display());
    let env = [
        ("REPOS", url.as_str()),
        ("GIT_USERNAME", "u"),
        ("GIT_TOKEN", token.as_str()),
    ]
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .to_vec();
    let g = Garrison::start_on_with_env(
        &emu,
        GarrisonOptions {
            outpost: &outpost,
            state_dir: &state,
            extra_args: vec![],
        },
        backend,
        env,
    );
    let id = session(
        &emu,
        &outpost,
        vec![
            run("git -C repo log --oneline && pwd"),
            run(
                "ls /.garrison/proc; cat /.garrison/proc/*/* 2>/dev/null; cat /proc/[0-9]*/environ | tr '\\0' '\\n'",
            ),
            run(
                "grep -rla gtok_ / --exclude-dir=proc --exclude-dir=sys 2>/dev/null; echo searched",
            ),
        ],
        Then::End,
    );
    wait_until("the three steps ran", Some(&g), || {
        step_outputs(&emu, &id).len() == 3
    })
    .await;
    let outputs = step_outputs(&emu, &id);
    assert!(outputs[0].contains(COMMIT_MESSAGE), "{outputs:?}");
    assert_eq!(outputs[0].lines().last(), Some("/workspace"), "{outputs:?}");
    assert!(outputs[1].contains("clone-0-unpack"), "{outputs:?}");
    assert!(outputs[2].trim_end().ends_with("searched"), "{outputs:?}");
    for output in &outputs {
        assert!(
            !output.contains(&token),
            "the token is in the sandbox: {output}"
        );
    }
    assert_eq!(
        outputs[2].trim(),
        "searched",
        "a file in the sandbox holds a gtok_ token"
    );
    assert!(!g.log().contains(&token));
}

/// The clone reaches a cloud sandbox through its files API as it does a
/// local one (the mocks run on this host; the clone is made by Garrison).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clone_reaches_tensorlake_and_modal_sandboxes() {
    for backend in [Backend::Tensorlake, Backend::Modal] {
        let emu = emulator().await;
        let outpost = outpost(&emu);
        let dir = tempfile::tempdir().unwrap();
        let repo = bare_repo(dir.path());
        let state = dir.path().join("state");
        let token = random_token();
        let url = format!("file://{}", repo.display());
        let env = [("REPOS", url.as_str()), ("GIT_TOKEN", token.as_str())]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .to_vec();
        let g = Garrison::start_on_with_env(
            &emu,
            GarrisonOptions {
                outpost: &outpost,
                state_dir: &state,
                extra_args: vec![],
            },
            backend,
            env,
        );
        let id = session(
            &emu,
            &outpost,
            vec![run("git -C repo log --oneline; ls -a")],
            Then::End,
        );
        wait_until("the step ran", Some(&g), || {
            step_outputs(&emu, &id).len() == 1
        })
        .await;
        let out = &step_outputs(&emu, &id)[0];
        assert!(out.contains(COMMIT_MESSAGE), "{backend:?}: {out}");
        assert!(
            !out.contains(".garrison-clone"),
            "{backend:?}: parts left: {out}"
        );
        assert!(!out.contains(&token));
    }
}
