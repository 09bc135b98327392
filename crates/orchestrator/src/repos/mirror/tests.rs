use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use super::*;

/// A repository with one commit on `main`, as its host would serve it.
fn origin(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let work = dir.join("origin");
    git(dir, &["init", "-q", "-b", "main", work.to_str().unwrap()]);
    commit(&work, "first");
    work
}

fn commit(work: &Path, message: &str) {
    std::fs::write(work.join("file"), message).unwrap();
    git(work, &["add", "file"]);
    git(
        work,
        &[
            "-c",
            "user.name=T",
            "-c",
            "user.email=t@example.com",
            "commit",
            "-q",
            "-m",
            message,
        ],
    );
}

fn git(cwd: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(cwd)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("git is installed");
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The subject of the mirror's `main`.
fn mirrored_subject(lease: &MirrorLease) -> String {
    git(&lease.path, &["log", "-1", "--format=%s", "main"])
        .trim()
        .to_owned()
}

fn url_of(work: &Path) -> String {
    format!("file://{}", work.display())
}

#[tokio::test]
async fn a_mirror_is_cloned_once_then_fetched_only_when_older_than_the_interval() {
    let dir = tempfile::tempdir().unwrap();
    let work = origin(dir.path());
    let url = url_of(&work);
    let mirrors = Mirrors::refetching_after(dir.path().join("mirrors"), Duration::from_secs(3600));
    let repos = Repos::default();

    let lease = mirrors.lease(&url, &repos).await.unwrap().ok().unwrap();
    assert_eq!(lease.how, MirrorUse::Cloned);
    assert_eq!(mirrored_subject(&lease), "first");
    drop(lease);

    // Within the interval the repository's host is not asked again: a
    // commit made meanwhile is not in the mirror yet.
    commit(&work, "second");
    let lease = mirrors.lease(&url, &repos).await.unwrap().ok().unwrap();
    assert_eq!(lease.how, MirrorUse::Fresh);
    assert_eq!(mirrored_subject(&lease), "first");
    drop(lease);

    // Past it, the mirror is fetched.
    let stale = Mirrors::refetching_after(dir.path().join("mirrors"), Duration::ZERO);
    let lease = stale.lease(&url, &repos).await.unwrap().ok().unwrap();
    assert_eq!(lease.how, MirrorUse::Fetched);
    assert_eq!(mirrored_subject(&lease), "second");
}

// However many sessions on one repository start at once, the repository's
// host is asked once.
#[tokio::test]
async fn sessions_starting_together_share_one_clone_of_the_mirror() {
    let dir = tempfile::tempdir().unwrap();
    let work = origin(dir.path());
    let url = url_of(&work);
    let mirrors = Arc::new(Mirrors::refetching_after(
        dir.path().join("mirrors"),
        Duration::from_secs(3600),
    ));
    let mut starts = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let mirrors = mirrors.clone();
        let url = url.clone();
        starts.spawn(async move {
            let lease = mirrors
                .lease(&url, &Repos::default())
                .await
                .unwrap()
                .ok()
                .unwrap();
            lease.how
        });
    }
    let mut hows = BTreeMap::new();
    while let Some(how) = starts.join_next().await {
        *hows.entry(format!("{:?}", how.unwrap())).or_insert(0) += 1;
    }
    assert_eq!(
        hows,
        BTreeMap::from([("Cloned".into(), 1), ("Fresh".into(), 7)])
    );
}

#[tokio::test]
async fn a_mirror_that_cannot_be_cloned_says_why_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let url = url_of(&dir.path().join("no-such-repository"));
    let mirrors = Mirrors::new(dir.path().join("mirrors"));
    let Err(failed) = mirrors.lease(&url, &Repos::default()).await.unwrap() else {
        panic!("a missing repository was mirrored");
    };
    assert!(!failed.status.success());
    assert!(
        String::from_utf8_lossy(&failed.output).contains("no-such-repository"),
        "{}",
        String::from_utf8_lossy(&failed.output)
    );
    let left: Vec<_> = std::fs::read_dir(dir.path().join("mirrors"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(left, ["home"]);
}

#[test]
fn a_mirror_is_named_by_a_hash_of_its_url_never_by_the_url() {
    let mirrors = Mirrors::new(PathBuf::from("/state/repo-mirrors"));
    let path = mirrors.path_of("https://h/../../etc/passwd");
    assert_eq!(path.parent(), Some(Path::new("/state/repo-mirrors")));
    let name = path.file_name().unwrap().to_str().unwrap();
    assert!(name.ends_with(".git") && !name.contains(".."), "{name}");
}

#[tokio::test]
async fn mirrors_of_repositories_no_longer_cloned_are_removed_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let kept = url_of(&origin(&dir.path().join("a")));
    let dropped = url_of(&origin(&dir.path().join("b")));
    let mirrors = Mirrors::new(dir.path().join("mirrors"));
    for url in [&kept, &dropped] {
        drop(
            mirrors
                .lease(url, &Repos::default())
                .await
                .unwrap()
                .ok()
                .unwrap(),
        );
    }
    std::fs::create_dir(dir.path().join("mirrors/cut-short.partial")).unwrap();

    assert_eq!(mirrors.remove_all_but([kept.as_str()]), 2);

    assert!(mirrors.path_of(&kept).is_dir());
    assert!(!mirrors.path_of(&dropped).exists());
    assert!(!dir.path().join("mirrors/cut-short.partial").exists());
}
