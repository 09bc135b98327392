//! What a host sandbox's processes find on this machine: the user they
//! run as and its browser.

use std::fs;
use std::os::unix::fs::PermissionsExt;

/// The name of the effective user, or its uid when it has no name (a
/// container started with an arbitrary `--user`).
pub(crate) fn effective_user() -> String {
    let uid = nix::unistd::geteuid();
    match nix::unistd::User::from_uid(uid) {
        Ok(Some(user)) => user.name,
        _ => uid.to_string(),
    }
}

/// The first of [`sandbox::CHROME_CANDIDATES`] that is an executable file on
/// this machine.
pub(crate) fn host_chrome() -> Option<String> {
    sandbox::CHROME_CANDIDATES
        .iter()
        .find(|path| {
            fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .map(|path| (*path).to_owned())
}
