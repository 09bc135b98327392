//! How the credentials reach the clone command and nothing else. The clone
//! runs on Garrison's side, never in the sandbox (`clone.rs`); the
//! credentials are in that one process's environment, and an inline credential helper given
//! with `git -c` hands them to git: the helper names the variables, never
//! their values, so argv carries no secret, and `git -c` (unlike
//! `git clone -c`) writes nothing into the new repository's configuration.
//! An empty `credential.helper` first clears any helper the image configures
//! (a `store` helper would otherwise save the token in a file). After each
//! clone, its `.git/config` is read back and the start fails if it holds a
//! credential helper or the token.

use std::collections::BTreeMap;

#[cfg(test)]
use super::plan::PlannedClone;
use super::plan::Repos;
use super::plan::{GIT_TOKEN_ENV, GIT_USERNAME_ENV};

/// Answers git's `get` with the two variables of its own environment and
/// ignores `store` and `erase`.
const CREDENTIAL_HELPER: &str = "!f() { test \"$1\" = get || exit 0; \
     echo \"username=${GIT_USERNAME:-x-access-token}\"; echo \"password=${GIT_TOKEN}\"; }; f";

/// git with the credential options first (see the module's note), then
/// `args`.
fn git_argv(with_token: bool, args: &[&str]) -> Vec<String> {
    let mut argv: Vec<String> = vec!["git".into(), "-c".into(), "credential.helper=".into()];
    if with_token {
        argv.extend([
            "-c".into(),
            format!("credential.helper={CREDENTIAL_HELPER}"),
        ]);
    }
    argv.extend(["-c", "core.askPass="].map(str::to_owned));
    argv.extend(args.iter().map(|a| (*a).to_owned()));
    argv
}

/// `git clone` of one repository, run in the workspace.
#[cfg(test)]
pub(super) fn clone_argv(clone: &PlannedClone, with_token: bool) -> Vec<String> {
    git_argv(
        with_token,
        &["clone", "--quiet", "--", &clone.url, &clone.dir],
    )
}

/// `git clone --mirror` of `url` into `dir`: a host's first use of a
/// repository.
pub(super) fn mirror_clone_argv(url: &str, dir: &str, with_token: bool) -> Vec<String> {
    git_argv(
        with_token,
        &["clone", "--mirror", "--quiet", "--", url, dir],
    )
}

/// The mirror's fetch, run in the mirror: every ref, pruned. Without
/// automatic gc, which could repack under a session's clone reading the
/// mirror at the same time.
pub(super) fn mirror_fetch_argv(with_token: bool) -> Vec<String> {
    git_argv(
        with_token,
        &["-c", "gc.auto=0", "fetch", "--prune", "--quiet", "origin"],
    )
}

/// The clone command's whole environment: the credentials only when set.
pub(super) fn clone_env(repos: &Repos, home: &str) -> BTreeMap<String, String> {
    let mut env = BTreeMap::from([
        ("PATH".to_owned(), crate::contract::PATH.to_owned()),
        ("HOME".to_owned(), home.to_owned()),
        ("LANG".to_owned(), "C.UTF-8".to_owned()),
        ("GIT_TERMINAL_PROMPT".to_owned(), "0".to_owned()),
        // ssh must fail, not wait for a passphrase or a host key answer.
        (
            "GIT_SSH_COMMAND".to_owned(),
            "ssh -o BatchMode=yes".to_owned(),
        ),
    ]);
    if let Some(user) = &repos.git_username {
        env.insert(GIT_USERNAME_ENV.to_owned(), user.clone());
    }
    if let Some(token) = &repos.git_token {
        env.insert(GIT_TOKEN_ENV.to_owned(), token.expose().to_owned());
    }
    env
}

/// Refuses a repository configuration holding a credential helper or the
/// token.
pub(super) fn check_config(config: &str, repos: &Repos) -> Result<(), String> {
    if let Some(token) = &repos.git_token
        && !token.is_empty()
        && config.contains(token.expose())
    {
        return Err("the token was written into the repository's configuration".into());
    }
    let lower = config.to_ascii_lowercase();
    if lower.contains("[credential") || lower.contains("helper") {
        return Err("a credential helper was written into the repository's configuration".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use fleet::Secret;

    use super::*;
    use crate::repos::plan::DEFAULT_GIT_USERNAME;

    #[test]
    fn the_token_is_in_the_environment_only_never_in_argv() {
        let repos = Repos {
            urls: vec![],
            git_username: Some("u".into()),
            git_token: Some(Secret::new("tok-abcdefgh")),
        };
        let clone = PlannedClone {
            url: "https://github.com/o/r.git".into(),
            dir: "r".into(),
        };
        let argv = clone_argv(&clone, true);
        assert!(argv.iter().all(|a| !a.contains("tok-abcdefgh")));
        // The image's helpers are cleared before ours is added.
        assert_eq!(argv[1..3], ["-c", "credential.helper="]);
        assert!(argv[4].starts_with("credential.helper=!f()"));
        assert_eq!(
            argv[argv.len() - 3..],
            ["--", "https://github.com/o/r.git", "r"]
        );
        let env = clone_env(&repos, "/home/x");
        assert_eq!(env["GIT_TOKEN"], "tok-abcdefgh");
        assert_eq!(env["GIT_USERNAME"], "u");
        assert_eq!(env["GIT_TERMINAL_PROMPT"], "0");

        let public = Repos::default();
        let env = clone_env(&public, "/home/x");
        assert!(!env.contains_key("GIT_TOKEN") && !env.contains_key("GIT_USERNAME"));
        assert!(!clone_argv(&clone, false).iter().any(|a| a.contains("!f()")));
    }

    #[test]
    fn a_config_with_a_helper_or_the_token_is_refused() {
        let repos = Repos {
            git_token: Some(Secret::new("tok-abcdefgh")),
            ..Repos::default()
        };
        let clean = "[core]\n\tbare = false\n[remote \"origin\"]\n\turl = https://h/o/r\n";
        assert!(check_config(clean, &repos).is_ok());
        assert!(check_config("[credential]\n\thelper = store\n", &repos).is_err());
        assert!(
            check_config(
                "[remote \"origin\"]\n\turl = https://u:tok-abcdefgh@h/o/r\n",
                &repos
            )
            .is_err()
        );
    }

    /// Runs `git <the clone's -c options> credential <op>` with `input`,
    /// a global config of `global` and the credentials in the environment.
    fn git_credential(op: &str, input: &str, global: &std::path::Path) -> String {
        use std::io::Write;
        let clone = PlannedClone {
            url: "https://example.com/o/r.git".into(),
            dir: "r".into(),
        };
        let argv = clone_argv(&clone, true);
        let options = &argv[1..argv.iter().position(|a| a == "clone").unwrap()];
        let mut child = std::process::Command::new("git")
            .args(options)
            .args(["credential", op])
            .env_clear()
            .env("PATH", crate::contract::PATH)
            .env("HOME", global.parent().unwrap())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", global)
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_USERNAME", "ada")
            .env("GIT_TOKEN", "tok-abcdefgh")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("git is installed");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "git credential {op} failed");
        String::from_utf8(out.stdout).unwrap()
    }

    /// Through git itself: the helper answers, and a `store` helper the
    /// machine configures is cleared, so the token is never saved to a file.
    #[test]
    fn git_uses_the_inline_helper_and_no_other() {
        let dir = tempfile::tempdir().unwrap();
        let saved = dir.path().join("saved-credentials");
        let global = dir.path().join("gitconfig");
        std::fs::write(
            &global,
            format!(
                "[credential]\n\thelper = store --file={}\n",
                saved.display()
            ),
        )
        .unwrap();
        let filled = git_credential("fill", "protocol=https\nhost=example.com\n\n", &global);
        assert!(
            filled.contains("username=ada\n") && filled.contains("password=tok-abcdefgh\n"),
            "{filled}"
        );
        git_credential("approve", &filled, &global);
        assert!(
            !saved.exists(),
            "the machine's store helper saved the token"
        );
        // The check above can fail: without the clone's options, git stores.
        let status = std::process::Command::new("git")
            .args(["credential", "approve"])
            .env_clear()
            .env("PATH", crate::contract::PATH)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", &global)
            .stdin(
                std::fs::File::open({
                    let input = dir.path().join("input");
                    std::fs::write(&input, &filled).unwrap();
                    input
                })
                .unwrap(),
            )
            .status()
            .unwrap();
        assert!(status.success() && saved.exists());
    }

    /// The helper, run by a shell as git would, prints exactly the two
    /// values of its environment for `get` and nothing otherwise.
    #[test]
    fn the_helper_answers_get_from_its_environment() {
        let script = CREDENTIAL_HELPER.strip_prefix('!').unwrap();
        let run = |op: &str, user: Option<&str>| {
            let mut cmd = std::process::Command::new("sh");
            cmd.arg("-c")
                .arg(format!("{script} \"$@\""))
                .arg("helper")
                .arg(op)
                .env_clear()
                .env("GIT_TOKEN", "tok-abcdefgh");
            if let Some(user) = user {
                cmd.env("GIT_USERNAME", user);
            }
            String::from_utf8(cmd.output().unwrap().stdout).unwrap()
        };
        assert_eq!(
            run("get", Some("ada")),
            "username=ada\npassword=tok-abcdefgh\n"
        );
        assert_eq!(
            run("get", None),
            format!("username={DEFAULT_GIT_USERNAME}\npassword=tok-abcdefgh\n")
        );
        assert_eq!(run("store", Some("ada")), "");
        assert_eq!(run("erase", Some("ada")), "");
    }
}
