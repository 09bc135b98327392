//! The clone plan: the repositories configured ([`Repos`]), which
//! directory each is cloned into, and the names of the variables the clone
//! reads its credentials from.

use std::collections::HashSet;

use common::Secret;

use super::urls::{dir_name, validate_url};

/// The variable the clone reads the git user name from.
pub(super) const GIT_USERNAME_ENV: &str = "GIT_USERNAME";
/// Never a flag, never a file key: the environment only.
pub const GIT_TOKEN_ENV: &str = "GIT_TOKEN";
/// The user name given with a token when `GIT_USERNAME` is unset (what
/// GitHub expects; GitLab and others accept any name with a token). The
/// credential helper's script spells it out; only its tests name it here.
#[cfg(test)]
pub(super) const DEFAULT_GIT_USERNAME: &str = "x-access-token";

/// One repository and the directory it is cloned into.
///
/// Devin's reference says to "launch the remote from the directory
/// containing the session's repositories", and its quickstart clones
/// straight into the worker's `WORKDIR`: each repository is a direct child
/// of the remote's working directory (the sandbox's workdir), `<name>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PlannedClone {
    /// The clone URL, without credentials.
    pub url: String,
    /// Relative to the remote's working directory: `<name>`.
    pub dir: String,
}

/// Repositories to clone into a fresh sandbox, and the credentials given to
/// the clone command only. `Debug` never shows the token.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Repos {
    /// Validated clone URLs, without credentials.
    pub urls: Vec<String>,
    /// The git user name given to clones.
    pub git_username: Option<String>,
    /// The git token given to clones.
    pub git_token: Option<Secret>,
}

/// Validates the URLs and gives each its directory, `<name>`; two URLs
/// with the same name get `name`, `name-2`, ...
pub(crate) fn plan(urls: &[String]) -> Result<Vec<PlannedClone>, String> {
    let mut taken = HashSet::new();
    let mut planned = Vec::new();
    for url in urls {
        let url = validate_url(url)?;
        let base = dir_name(&url)?;
        let mut dir = base.clone();
        let mut n = 2;
        while !taken.insert(dir.clone()) {
            dir = format!("{base}-{n}");
            n += 1;
        }
        planned.push(PlannedClone { url, dir });
    }
    Ok(planned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_dedupes_directories() {
        let urls = [
            "https://github.com/a/repo.git",
            "https://gitlab.com/b/repo",
            "git@host:c/repo.git",
            "https://github.com/a/other",
        ]
        .map(String::from);
        let dirs: Vec<String> = plan(&urls).unwrap().into_iter().map(|c| c.dir).collect();
        assert_eq!(dirs, ["repo", "repo-2", "repo-3", "other"]);
        assert!(plan(&["ftp://x/y".to_owned()]).is_err());
    }
}
