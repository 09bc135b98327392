//! A bare mirror of each repository on this host, shared by every session
//! that clones it: fetched from the repository's host at most once per
//! [`REFETCH_AFTER`] whatever the number of sessions starting, and cloned
//! from locally for each of them. Only the mirror's clone and fetch talk to
//! the repository's host, so they alone get the credentials, on this host
//! as before.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::sync::{OwnedRwLockReadGuard, RwLock};

use super::credentials::{clone_env, mirror_clone_argv, mirror_fetch_argv};
use super::git::run_git;
use super::plan::Repos;

/// How old a mirror may be before a session's clone fetches it again: a
/// burst of sessions on one repository makes one fetch, not one each.
pub(crate) const REFETCH_AFTER: Duration = Duration::from_secs(60);

/// What a session's clone found of its repository's mirror.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MirrorUse {
    /// None yet on this host: cloned from the repository's host.
    Cloned,
    /// Older than [`REFETCH_AFTER`] (or not fetched since Garrison
    /// started): fetched.
    Fetched,
    /// Fetched within [`REFETCH_AFTER`]: used as it is.
    Fresh,
}

impl MirrorUse {
    /// The word in the `repo_cloned` event.
    pub(crate) fn word(self) -> &'static str {
        match self {
            Self::Cloned => "cloned",
            Self::Fetched => "fetched",
            Self::Fresh => "fresh",
        }
    }
}

/// When a mirror was last brought up to date by this Garrison.
type LastFetch = Option<Instant>;

/// The mirrors under one directory (`<state>/repo-mirrors`).
pub(crate) struct Mirrors {
    root: PathBuf,
    refetch_after: Duration,
    by_url: Mutex<HashMap<String, Arc<RwLock<LastFetch>>>>,
}

/// A mirror brought up to date, held for reading: no fetch of the same
/// repository runs until it is dropped.
pub(crate) struct MirrorLease {
    pub path: PathBuf,
    pub how: MirrorUse,
    _reading: OwnedRwLockReadGuard<LastFetch>,
}

/// A mirror that could not be brought up to date: git's status and words.
pub(crate) struct MirrorFailed {
    pub status: ExitStatus,
    pub output: Vec<u8>,
}

impl Mirrors {
    pub(crate) fn new(root: PathBuf) -> Self {
        Self::refetching_after(root, REFETCH_AFTER)
    }

    pub(crate) fn refetching_after(root: PathBuf, refetch_after: Duration) -> Self {
        Self {
            root,
            refetch_after,
            by_url: Mutex::new(HashMap::new()),
        }
    }

    /// The mirror of `url`, cloned or fetched first when it is missing or
    /// older than the refetch interval. Sessions on one repository share
    /// one fetch: the first takes the mirror's lock for writing, the rest
    /// wait for it and then read.
    pub(crate) async fn lease(
        &self,
        url: &str,
        repos: &Repos,
    ) -> anyhow::Result<Result<MirrorLease, MirrorFailed>> {
        let lock = self
            .by_url
            .lock()
            .expect("mirror table lock")
            .entry(url.to_owned())
            .or_default()
            .clone();
        let path = self.path_of(url);
        let fresh = |last: &LastFetch| {
            last.is_some_and(|at| at.elapsed() < self.refetch_after) && path.exists()
        };
        {
            let reading = lock.clone().read_owned().await;
            if fresh(&reading) {
                return Ok(Ok(MirrorLease {
                    path,
                    how: MirrorUse::Fresh,
                    _reading: reading,
                }));
            }
        }
        let mut writing = lock.write_owned().await;
        // Another session may have fetched while this one waited.
        if fresh(&writing) {
            return Ok(Ok(MirrorLease {
                path,
                how: MirrorUse::Fresh,
                _reading: writing.downgrade(),
            }));
        }
        let how = if path.exists() {
            MirrorUse::Fetched
        } else {
            MirrorUse::Cloned
        };
        let (status, output) = self.bring_up_to_date(url, repos, &path, how).await?;
        if !status.success() {
            return Ok(Err(MirrorFailed { status, output }));
        }
        *writing = Some(Instant::now());
        Ok(Ok(MirrorLease {
            path,
            how,
            _reading: writing.downgrade(),
        }))
    }

    /// Removes the mirrors of repositories no outpost clones any more (and
    /// any clone cut short), so a URL taken out of `REPOS` does not keep
    /// its mirror's disk; run at start, before any session clones. Returns
    /// how many went.
    pub(crate) fn remove_all_but<'a>(&self, urls: impl IntoIterator<Item = &'a str>) -> usize {
        let keep: std::collections::HashSet<_> = urls
            .into_iter()
            .map(|url| format!("{}.git", sandbox::hashed_id(url)))
            .collect();
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return 0;
        };
        let mut removed = 0;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name == "home" || keep.contains(&name) {
                continue;
            }
            if std::fs::remove_dir_all(entry.path()).is_ok() {
                removed += 1;
            }
        }
        removed
    }

    /// `<root>/<hash of the URL>.git`: the URL is the repository host's
    /// text, never a path component.
    fn path_of(&self, url: &str) -> PathBuf {
        self.root.join(format!("{}.git", sandbox::hashed_id(url)))
    }

    async fn bring_up_to_date(
        &self,
        url: &str,
        repos: &Repos,
        path: &Path,
        how: MirrorUse,
    ) -> anyhow::Result<(ExitStatus, Vec<u8>)> {
        use std::os::unix::fs::DirBuilderExt;
        let home = self.root.join("home");
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&home)
            .with_context(|| format!("creating {}", home.display()))?;
        let env = clone_env(repos, &home.display().to_string());
        let with_token = repos.git_token.is_some();
        if how == MirrorUse::Fetched {
            let argv = mirror_fetch_argv(with_token);
            return run_git(&argv, &env, path, &format!("git fetch of {url}")).await;
        }
        // Cloned beside, then renamed: a clone cut short (Garrison killed)
        // never passes for a mirror.
        let partial = path.with_extension("partial");
        let _ = std::fs::remove_dir_all(&partial);
        let argv = mirror_clone_argv(url, &partial.display().to_string(), with_token);
        let done = run_git(&argv, &env, &self.root, &format!("git clone of {url}")).await?;
        if done.0.success() {
            std::fs::rename(&partial, path)
                .with_context(|| format!("moving the mirror of {url} into place"))?;
        } else {
            let _ = std::fs::remove_dir_all(&partial);
        }
        Ok(done)
    }
}

#[cfg(test)]
mod tests;
