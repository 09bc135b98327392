//! Repositories cloned into a fresh sandbox before the remote starts
//! (`REPOS`, with `GIT_USERNAME` and `GIT_TOKEN` for private ones).
//!
//! The credentials reach the clone command only. They are in that one
//! process's environment, and an inline credential helper given with
//! `git -c` hands them to git: the helper names the variables, never their
//! values, so argv carries no secret, and `git -c` (unlike `git clone -c`)
//! writes nothing into the new repository's configuration. An empty
//! `credential.helper` first clears any helper the image configures (a
//! `store` helper would otherwise save the token in a file). After each
//! clone, its `.git/config` is read back and the start fails if it holds a
//! credential helper or the token.
//!
//! Only a sandbox created fresh is cloned into: one restored from a snapshot
//! has the repositories in its workspace already.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use anyhow::{anyhow, bail};
use sandbox::{Handle, ProcessRef, ProcessSpec, ProcessStatus, Sandbox};

use crate::session_log::SessionLogs;
use crate::settings::Repos;

pub const GIT_USERNAME_ENV: &str = "GIT_USERNAME";
/// Never a flag, never a file key: the environment only.
pub const GIT_TOKEN_ENV: &str = "GIT_TOKEN";
/// The user name given with a token when `GIT_USERNAME` is unset (what
/// GitHub expects; GitLab and others accept any name with a token).
pub const DEFAULT_GIT_USERNAME: &str = "x-access-token";

/// Answers git's `get` with the two variables of its own environment and
/// ignores `store` and `erase`.
const CREDENTIAL_HELPER: &str = "!f() { test \"$1\" = get || exit 0; \
     echo \"username=${GIT_USERNAME:-x-access-token}\"; echo \"password=${GIT_TOKEN}\"; }; f";

/// A clone that takes longer than this is stopped and the start fails.
const CLONE_TIMEOUT: Duration = Duration::from_secs(30 * 60);
const POLL: Duration = Duration::from_millis(100);
const OUTPUT_CHUNK: usize = 256 * 1024;
/// Output quoted in an error, from its end.
const ERROR_OUTPUT: usize = 2000;

/// One repository and the directory (in the workspace) it is cloned into.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedClone {
    pub url: String,
    pub dir: String,
}

const CREDENTIALS_HINT: &str = "a clone URL must not contain a password or token (URL not shown): \
     set GIT_USERNAME and GIT_TOKEN in the environment instead";

/// Checks one clone URL and returns it trimmed: `https://`, `http://`,
/// `ssh://`, `file://` or `[user@]host:path`. A URL carrying credentials is
/// refused and never echoed.
pub fn validate_url(text: &str) -> Result<String, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("the clone URL is empty".into());
    }
    if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("a clone URL contains whitespace or a control character".into());
    }
    // `<transport>::<address>` runs a remote helper (`ext::` runs commands).
    if let Some(at) = text.find("::")
        && text.find("://").is_none_or(|scheme| at < scheme)
    {
        return Err(format!(
            "{text:?}: the <transport>::<address> form is not allowed (expected https, http, ssh, file or user@host:path)"
        ));
    }
    if text.starts_with('-') {
        return Err(format!("{text:?} is not a clone URL (it starts with '-')"));
    }
    if text.contains("://") {
        let url = url::Url::parse(text).map_err(|e| {
            if text.contains('@') {
                format!("not a valid URL: {e} (URL not shown)")
            } else {
                format!("{text:?} is not a valid URL: {e}")
            }
        })?;
        let scheme = url.scheme();
        let user_allowed = scheme == "ssh";
        if url.password().is_some() || (!user_allowed && !url.username().is_empty()) {
            return Err(CREDENTIALS_HINT.into());
        }
        match scheme {
            "https" | "http" | "ssh" => {
                if url.host_str().is_none_or(str::is_empty) {
                    return Err(format!("{text:?} has no host"));
                }
                if url.path().trim_matches('/').is_empty() {
                    return Err(format!("{text:?} names no repository"));
                }
            }
            "file" => {
                if url.path().trim_matches('/').is_empty() {
                    return Err(format!("{text:?} names no repository"));
                }
            }
            other => {
                return Err(format!(
                    "{text:?}: unsupported scheme {other:?} (expected https, http, ssh, file or user@host:path)"
                ));
            }
        }
        if url.query().is_some() {
            return Err("a clone URL must not have a query (?...) (URL not shown)".into());
        }
        if url.fragment().is_some() {
            return Err(format!("{text:?} must not have a fragment (#...)"));
        }
        return Ok(text.to_owned());
    }
    // scp-like: [user@]host:path, with no slash before the colon (git reads
    // that as a local path).
    let Some((authority, path)) = text.split_once(':') else {
        return Err(format!(
            "{text:?} is not a clone URL (expected https://, http://, ssh://, file:// or user@host:path)"
        ));
    };
    if authority.contains('/') {
        return Err(format!(
            "{text:?} is not a clone URL (expected https://, http://, ssh://, file:// or user@host:path)"
        ));
    }
    // `user:password@host:path` splits as host "user", path "password@host:path".
    if path
        .split('/')
        .next()
        .is_some_and(|first| first.contains('@'))
    {
        return Err(CREDENTIALS_HINT.into());
    }
    let (user, host) = match authority.split_once('@') {
        Some((user, host)) => (Some(user), host),
        None => (None, authority),
    };
    let plain = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
    };
    if user.is_some_and(|u| !plain(u)) || !plain(host) || host.starts_with('-') {
        return Err(format!("{text:?}: invalid user or host before ':'"));
    }
    if path.trim_matches('/').is_empty() || path.starts_with('-') {
        return Err(format!("{text:?} names no repository after ':'"));
    }
    Ok(text.to_owned())
}

/// The directory a URL is cloned into: its last path segment without
/// `.git`, with anything but letters, digits, `.`, `_` and `-` replaced by
/// `-`.
pub fn dir_name(url: &str) -> Result<String, String> {
    let path = match url.split_once("://") {
        Some(_) => url::Url::parse(url)
            .map_err(|e| format!("not a valid URL: {e}"))?
            .path()
            .to_owned(),
        None => url
            .split_once(':')
            .map(|(_, p)| p)
            .unwrap_or(url)
            .to_owned(),
    };
    let last = path
        .split('/')
        .rfind(|s| !s.is_empty())
        .ok_or_else(|| "the URL names no repository".to_owned())?;
    let last = last.strip_suffix(".git").unwrap_or(last);
    let name: String = last
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    if name.is_empty() || name == "." || name == ".." || name == ".git" || name.starts_with('-') {
        return Err(format!(
            "cannot name a directory after the URL's last path segment ({name:?})"
        ));
    }
    if name.len() > 100 {
        return Err("the URL's last path segment is longer than 100 characters".into());
    }
    Ok(name)
}

/// Validates the URLs and gives each its directory; two URLs with the same
/// name get `name`, `name-2`, ...
pub fn plan(urls: &[String]) -> Result<Vec<PlannedClone>, String> {
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

/// `git clone` of one repository, run in the workspace.
pub fn clone_argv(clone: &PlannedClone, with_token: bool) -> Vec<String> {
    let mut argv: Vec<String> = vec!["git".into(), "-c".into(), "credential.helper=".into()];
    if with_token {
        argv.extend([
            "-c".into(),
            format!("credential.helper={CREDENTIAL_HELPER}"),
        ]);
    }
    argv.extend(
        [
            "-c",
            "core.askPass=",
            "clone",
            "--quiet",
            "--",
            &clone.url,
            &clone.dir,
        ]
        .map(str::to_owned),
    );
    argv
}

/// The clone command's whole environment: the credentials only when set.
pub fn clone_env(repos: &Repos, home: &str) -> BTreeMap<String, String> {
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

/// Clones one repository into the sandbox's workspace: spawns `clone-<n>`,
/// waits for it, copies its output into the session log, then reads the
/// clone's `.git/config` back (process `clone-<n>-check`) and refuses a
/// credential helper or the token in it.
pub async fn clone_one(
    backend: &dyn Sandbox,
    handle: &Handle,
    n: usize,
    clone: &PlannedClone,
    repos: &Repos,
    logs: &SessionLogs,
    session_id: &str,
) -> anyhow::Result<()> {
    let name = format!("clone-{n}");
    let spec = ProcessSpec {
        name: name.clone(),
        argv: clone_argv(clone, repos.git_token.is_some()),
        env: clone_env(repos, &handle.home),
        cwd: handle.workdir.clone(),
    };
    let (status, output) = run(backend, handle, &spec).await?;
    let _ = logs.remote_output(session_id, &output);
    if status != ProcessStatus::Exited(0) {
        let text = String::from_utf8_lossy(&output);
        let tail = tail_of(text.trim(), ERROR_OUTPUT);
        // The caller scrubs the message; the output is scrubbed here too, so
        // the error is safe wherever it goes.
        let tail = logs.redactor().scrub(tail);
        bail!(
            "cloning {} into {} failed ({}): {tail}",
            clone.url,
            clone.dir,
            describe(status)
        );
    }

    let config = format!("{}/.git/config", clone.dir);
    let check = ProcessSpec {
        name: format!("{name}-check"),
        argv: vec!["cat".into(), "--".into(), config.clone()],
        env: BTreeMap::from([("PATH".to_owned(), crate::contract::PATH.to_owned())]),
        cwd: handle.workdir.clone(),
    };
    let (status, output) = run(backend, handle, &check).await?;
    if status != ProcessStatus::Exited(0) {
        bail!(
            "reading {config} after cloning failed ({})",
            describe(status)
        );
    }
    check_config(&String::from_utf8_lossy(&output), repos)
        .map_err(|reason| anyhow!("{config} after cloning {}: {reason}", clone.url))
}

/// Refuses a repository configuration holding a credential helper or the
/// token.
pub fn check_config(config: &str, repos: &Repos) -> Result<(), String> {
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

/// Spawns `spec`, waits for it (at most [`CLONE_TIMEOUT`]) and returns its
/// status and whole output.
async fn run(
    backend: &dyn Sandbox,
    handle: &Handle,
    spec: &ProcessSpec,
) -> anyhow::Result<(ProcessStatus, Vec<u8>)> {
    let process: ProcessRef = backend
        .spawn(handle, spec)
        .await
        .map_err(|e| anyhow!(e).context(format!("starting {}", spec.name)))?;
    let status = match tokio::time::timeout(
        CLONE_TIMEOUT,
        sandbox::wait_exit(backend, handle, &process, POLL),
    )
    .await
    {
        Ok(status) => {
            status.map_err(|e| anyhow!(e).context(format!("waiting for {}", spec.name)))?
        }
        Err(_) => {
            let _ = backend.kill(handle, &process, Duration::from_secs(5)).await;
            bail!("{} did not finish within {CLONE_TIMEOUT:?}", spec.name);
        }
    };
    let mut output = Vec::new();
    let mut offset = 0;
    loop {
        let chunk = backend
            .read_output(handle, &process, offset, OUTPUT_CHUNK)
            .await
            .map_err(|e| anyhow!(e).context(format!("reading the output of {}", spec.name)))?;
        if chunk.data.is_empty() {
            break;
        }
        output.extend_from_slice(&chunk.data);
        offset = chunk.next_offset;
    }
    Ok((status, output))
}

fn describe(status: ProcessStatus) -> String {
    match status {
        ProcessStatus::Exited(code) => format!("exit code {code}"),
        ProcessStatus::Lost => "the process was lost".into(),
        ProcessStatus::Running => "still running".into(),
    }
}

/// At most the last `max` bytes of `text`, on a character boundary.
fn tail_of(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

#[cfg(test)]
mod tests {
    use fleet::Secret;

    use super::*;

    #[test]
    fn accepts_the_supported_forms() {
        for url in [
            "https://github.com/org/repo.git",
            "http://git.internal:8080/team/tool",
            "https://[::1]:8443/team/tool.git",
            "ssh://git@github.com/org/repo.git",
            "ssh://host.example/srv/repo",
            "git@github.com:org/repo.git",
            "host.example:repo",
            "file:///srv/git/repo.git",
            "  https://github.com/org/repo  ",
        ] {
            assert_eq!(validate_url(url).as_deref(), Ok(url.trim()), "{url}");
        }
    }

    #[test]
    fn refuses_credentials_without_echoing_them() {
        for url in [
            "https://user:hunter2secret@github.com/org/repo.git",
            "https://ghp_hunter2secret@github.com/org/repo.git",
            "http://user:hunter2secret@host/repo",
            "ssh://git:hunter2secret@host/repo",
            "git:hunter2secret@github.com:org/repo.git",
            "https://github.com/org/repo.git?access_token=hunter2secret",
        ] {
            let err = validate_url(url).expect_err(url);
            assert!(!err.contains("hunter2secret"), "{err}");
        }
        let err = validate_url("https://u:p@github.com/o/r").unwrap_err();
        assert!(
            err.contains("GIT_USERNAME") && err.contains("GIT_TOKEN"),
            "{err}"
        );
    }

    #[test]
    fn refuses_what_is_not_a_clone_url() {
        for url in [
            "",
            "   ",
            "ftp://host/repo",
            "ext::sh -c touch% /tmp/pwned",
            "ext::sh",
            "/srv/git/repo",
            "./repo",
            "-uhttps://x/y",
            "https:///repo",
            "https://github.com/",
            "file:///",
            "a/b:c",
            "host:",
            "host:-x",
            "https://github.com/o/r#frag",
            "https://github.com/o/r\nx",
        ] {
            assert!(validate_url(url).is_err(), "{url:?} was accepted");
        }
    }

    #[test]
    fn directory_names_come_from_the_last_segment() {
        for (url, dir) in [
            ("https://github.com/org/repo.git", "repo"),
            ("https://github.com/org/repo/", "repo"),
            ("git@github.com:org/my.tool.git", "my.tool"),
            ("host:repo", "repo"),
            ("file:///srv/git/repo.git", "repo"),
            ("https://github.com/org/a%20b", "a-20b"),
            ("https://github.com/org/.github", ".github"),
        ] {
            assert_eq!(dir_name(url).as_deref(), Ok(dir), "{url}");
        }
        for url in [
            "https://github.com/org/..",
            "https://github.com/org/.git",
            "https://github.com/org/..git",
            "git@host:org/-rf",
        ] {
            assert!(dir_name(url).is_err(), "{url} gave {:?}", dir_name(url));
        }
    }

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
