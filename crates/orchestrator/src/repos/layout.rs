//! Where the remote starts in a workspace restored or resumed from a
//! snapshot.
//!
//! Garrison used to clone into `repos/<name>` below the sandbox's workdir and
//! start the remote in the workdir; Devin's reference wants the remote
//! started in the directory whose direct children are the repositories.
//! A workspace from before the change still has the old layout, and moving
//! the repositories would move files the agent may have paths to (in its
//! state directory, in shell history): the remote is started in
//! `<workdir>/repos` instead, which then holds the repositories as direct
//! children.

/// The directory, under the workdir, that held the repositories in the old
/// layout.
pub(super) const LEGACY_REPOS_DIR: &str = "repos";

/// Run in the workdir; prints `legacy` when the workspace has the old
/// layout: `repos/` is not itself a repository, at least one of its
/// children is one, and no direct child of the workdir is one (in the new
/// layout the repositories are those children, so a repository the agent
/// made in a `repos/` beside them does not move the remote).
pub(crate) const LEGACY_PROBE: &str = "[ -d repos ] && [ ! -e repos/.git ] || exit 0
for d in */.git; do [ -e \"$d\" ] && exit 0; done
for d in repos/*/.git; do [ -e \"$d\" ] && { echo legacy; exit 0; }; done
exit 0";

/// The remote's working directory, from the workdir and the probe's output
/// (`None` when the probe could not run: the workdir, as for a new
/// workspace).
pub(crate) fn remote_cwd(workdir: &str, probe_output: Option<&str>) -> String {
    match probe_output.map(str::trim) {
        Some("legacy") => format!("{}/{LEGACY_REPOS_DIR}", workdir.trim_end_matches('/')),
        _ => workdir.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn probe(setup: &str) -> String {
        let dir = tempfile::tempdir().unwrap();
        let script = format!("{setup}\n{LEGACY_PROBE}");
        let out = Command::new("/bin/sh")
            .args(["-c", &script])
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        remote_cwd("/w", Some(&String::from_utf8_lossy(&out.stdout)))
    }

    #[test]
    fn the_old_layout_starts_the_remote_in_repos() {
        assert_eq!(probe("mkdir -p repos/a/.git repos/b/.git"), "/w/repos");
        assert_eq!(probe("mkdir -p repos/a/.git notes"), "/w/repos");
    }

    #[test]
    fn the_new_layout_and_empty_workspaces_start_in_the_workdir() {
        // Nothing cloned, or repositories as direct children.
        assert_eq!(probe(""), "/w");
        assert_eq!(probe("mkdir -p a/.git b/.git"), "/w");
        // A repository named `repos`, cloned the new way.
        assert_eq!(probe("mkdir -p repos/.git repos/sub/.git"), "/w");
        // The agent made a `repos/` beside the cloned repositories.
        assert_eq!(probe("mkdir -p a/.git repos/x/.git"), "/w");
        // An empty `repos/`.
        assert_eq!(probe("mkdir repos"), "/w");
        assert_eq!(remote_cwd("/w", None), "/w");
    }
}
