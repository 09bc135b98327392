//! What a clone URL may be. Only the forms git clones without running
//! anything of the URL's choosing are accepted, a URL carrying credentials is
//! refused without being echoed (they belong in `GIT_USERNAME`/`GIT_TOKEN`),
//! and each URL is given the workspace directory it is cloned into.

const CREDENTIALS_HINT: &str = "a clone URL must not contain a password or token (URL not shown): \
     set GIT_USERNAME and GIT_TOKEN in the environment instead";

/// Checks one clone URL and returns it trimmed: `https://`, `http://`,
/// `ssh://`, `file://` or `[user@]host:path`. A URL carrying credentials is
/// refused and never echoed.
pub(crate) fn validate_url(text: &str) -> Result<String, String> {
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
pub(super) fn dir_name(url: &str) -> Result<String, String> {
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

#[cfg(test)]
mod tests {
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
}
