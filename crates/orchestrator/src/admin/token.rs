//! The admin listener's token: who may change things (terminate a
//! session), and, on a listener reachable from other machines, who may look.
//!
//! Loopback is not a boundary on a shared machine: every local user and
//! every process (a session's, with the `host` backend) can reach it. The
//! token lives in `<state-dir>/admin-token`, mode 0600, generated on the
//! first start, so exactly the users who can read Garrison's state can
//! steer it; the CLI reads the same file (or `GARRISON_ADMIN_TOKEN`).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use anyhow::Context;
use axum::http::Method;
use common::Secret;

/// The file, in the state directory.
pub const ADMIN_TOKEN_FILE: &str = "admin-token";

/// The variable the CLI reads the token from when it cannot read the file.
pub const ADMIN_TOKEN_ENV: &str = "GARRISON_ADMIN_TOKEN";

/// The state directory's token, created (random, 0600) if there is none.
/// A token file others may read is refused rather than used.
pub(crate) fn load_or_create(state_dir: &Path) -> anyhow::Result<Secret> {
    let path = state_dir.join(ADMIN_TOKEN_FILE);
    let token = Secret::new(hex::encode(rand::random::<[u8; 32]>()));
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
    {
        Ok(mut file) => {
            file.write_all(format!("{}\n", token.expose()).as_bytes())
                .and_then(|()| file.sync_all())
                .with_context(|| format!("writing {}", path.display()))?;
            Ok(token)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let token = common::settings::read_secret_file(&path)?;
            anyhow::ensure!(
                token.expose().len() >= 32,
                "{} holds no usable admin token (delete it and restart to make a new one)",
                path.display()
            );
            Ok(token)
        }
        Err(e) => Err(e).with_context(|| format!("creating {}", path.display())),
    }
}

/// Whether a request must carry the token. Changing anything always does;
/// on a listener other machines can reach, so does reading anything but
/// the liveness probe and the dashboard's static shell (which hold no data;
/// its API calls carry the token).
pub(crate) fn needs_token(method: &Method, path: &str, loopback: bool) -> bool {
    let reads = matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
    if !reads {
        return true;
    }
    if loopback {
        return false;
    }
    let shell = path == "/"
        || path == "/healthz"
        || path.starts_with("/assets/")
        || path.starts_with("/sessions/");
    !shell
}

/// Whether an `Authorization` header value presents `token`, compared in
/// constant time.
pub(crate) fn presents(header: Option<&str>, token: &Secret) -> bool {
    let Some(given) = header.and_then(|h| h.strip_prefix("Bearer ")) else {
        return false;
    };
    let (given, want) = (given.trim().as_bytes(), token.expose().as_bytes());
    given.len() == want.len()
        && given
            .iter()
            .zip(want)
            .fold(0u8, |diff, (a, b)| diff | (a ^ b))
            == 0
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn what_needs_the_token() {
        let cases = [
            // (method, path, loopback) -> needs
            (Method::POST, "/api/sessions/x/terminate", true, true),
            (Method::POST, "/api/sessions/x/terminate", false, true),
            (Method::DELETE, "/anything", true, true),
            (Method::GET, "/api/sessions", true, false),
            (Method::GET, "/metrics", true, false),
            (Method::GET, "/api/sessions", false, true),
            (Method::GET, "/api/sessions/x/log", false, true),
            (Method::GET, "/metrics", false, true),
            (Method::GET, "/readyz", false, true),
            (Method::GET, "/healthz", false, false),
            (Method::GET, "/", false, false),
            (Method::GET, "/assets/app.js", false, false),
            (Method::GET, "/sessions/devin-1", false, false),
        ];
        for (method, path, loopback, needs) in cases {
            assert_eq!(
                needs_token(&method, path, loopback),
                needs,
                "{method} {path} loopback={loopback}"
            );
        }
    }

    #[test]
    fn only_the_exact_bearer_token_is_accepted() {
        let token = Secret::new("a".repeat(64));
        assert!(presents(
            Some(&format!("Bearer {}", "a".repeat(64))),
            &token
        ));
        for wrong in [
            None,
            Some("Bearer "),
            Some("Basic aaaa"),
            Some(&*format!("Bearer {}", "a".repeat(63))),
            Some(&*format!("Bearer {}b", "a".repeat(63))),
            Some(&*format!("bearer {}", "a".repeat(64))),
        ] {
            assert!(!presents(wrong, &token), "{wrong:?}");
        }
    }

    #[test]
    fn the_token_is_made_once_owner_only_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let first = load_or_create(dir.path()).unwrap();
        let path = dir.path().join(ADMIN_TOKEN_FILE);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(first.expose().len(), 64);
        let again = load_or_create(dir.path()).unwrap();
        assert_eq!(first.expose(), again.expose());

        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let refused = load_or_create(dir.path()).unwrap_err().to_string();
        assert!(refused.contains("admin-token"), "{refused}");
    }
}
