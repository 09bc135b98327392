//! The Debian package (`scripts/package`) installed as an operator would:
//! `dpkg -i` and `apt-get -f install` in a fresh Debian 12 root, then
//! `garrison --version` and `garrison doctor` there, then remove and purge,
//! checking what each leaves.
//!
//! It needs root, the package (`GARRISON_TEST_DEB`, which `scripts/test`
//! builds and exports) and the root `scripts/test-images` bootstraps with
//! the dependencies already in its apt cache: the install runs offline
//! (`--no-download`), as tests reach no network. Without them it skips.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::nix_is_root;

/// Mounts made for the test, undone (lazily) even when it fails.
struct Mounts(Vec<PathBuf>);

impl Drop for Mounts {
    fn drop(&mut self) {
        for target in self.0.iter().rev() {
            let _ = Command::new("umount").arg("-l").arg(target).status();
        }
    }
}

fn must(what: &str, out: std::io::Result<Output>) -> Output {
    let out = out.unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `args` run in `root` by chroot, with a plain environment.
fn in_root(root: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new("chroot");
    cmd.arg(root)
        .args(args)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("DEBIAN_FRONTEND", "noninteractive")
        .env("HOME", "/root");
    cmd
}

/// What the test needs, or why it skips.
fn prerequisites() -> Option<(PathBuf, PathBuf)> {
    if !nix_is_root() {
        eprintln!("skipped: installing a package needs root");
        return None;
    }
    let Some(deb) = std::env::var_os("GARRISON_TEST_DEB").map(PathBuf::from) else {
        eprintln!("skipped: GARRISON_TEST_DEB is not set (scripts/test builds the package)");
        return None;
    };
    let state = std::env::var_os("GARRISON_TEST_STATE").map(PathBuf::from)?;
    let root = state.join("debian12-apt-root");
    if !root.join(".ready").exists() {
        eprintln!(
            "skipped: {} is missing (scripts/test-images makes it)",
            root.display()
        );
        return None;
    }
    assert!(
        deb.is_file(),
        "GARRISON_TEST_DEB={} is missing",
        deb.display()
    );
    Some((deb, root))
}

#[test]
fn the_package_installs_runs_and_removes_cleanly_in_a_fresh_debian_12() {
    let Some((deb, pristine)) = prerequisites() else {
        return;
    };
    // The bootstrapped root stays pristine: the test writes to an overlay.
    let dir = tempfile::tempdir().unwrap();
    let (upper, work, root) = (
        dir.path().join("upper"),
        dir.path().join("work"),
        dir.path().join("root"),
    );
    for d in [&upper, &work, &root] {
        std::fs::create_dir(d).unwrap();
    }
    let mut mounts = Mounts(Vec::new());
    must(
        "mounting the overlay",
        Command::new("mount")
            .args(["-t", "overlay", "overlay", "-o"])
            .arg(format!(
                "lowerdir={},upperdir={},workdir={}",
                pristine.display(),
                upper.display(),
                work.display()
            ))
            .arg(&root)
            .output(),
    );
    mounts.0.push(root.clone());
    must(
        "mounting /proc",
        Command::new("mount")
            .args(["-t", "proc", "proc"])
            .arg(root.join("proc"))
            .output(),
    );
    mounts.0.push(root.join("proc"));

    std::fs::copy(&deb, root.join("tmp/garrison.deb")).unwrap();
    // Its dependencies are not there yet: dpkg unpacks and leaves it
    // unconfigured, and apt completes it from the cache.
    let _ = in_root(&root, &["dpkg", "-i", "/tmp/garrison.deb"]).output();
    must(
        "apt-get -f install",
        in_root(
            &root,
            &[
                "apt-get",
                "-f",
                "install",
                "-y",
                "-q",
                "--no-download",
                // Only Depends are in the offline cache (Recommends are
                // what a full install adds: runsc, mmdebstrap).
                "--no-install-recommends",
            ],
        )
        .output(),
    );
    let status = must(
        "dpkg -s garrison",
        in_root(&root, &["dpkg-query", "-W", "-f=${Status}", "garrison"]).output(),
    );
    assert_eq!(
        String::from_utf8_lossy(&status.stdout),
        "install ok installed"
    );

    for path in [
        "usr/bin/garrison",
        "usr/bin/garrison-shim",
        "usr/bin/devin-remote-sim",
        "lib/systemd/system/garrison.service",
        "etc/garrison/garrison.toml",
        "etc/garrison/env.example",
        "usr/share/man/man1/garrison-serve.1.gz",
        "usr/share/bash-completion/completions/garrison",
    ] {
        assert!(root.join(path).exists(), "{path} is not installed");
    }
    let unit = std::fs::read_to_string(root.join("lib/systemd/system/garrison.service")).unwrap();
    assert!(
        unit.contains("ExecStart=/usr/bin/garrison serve"),
        "the unit runs the packaged binary:\n{unit}"
    );
    let mode = |path: &str| {
        std::fs::metadata(root.join(path))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode("var/lib/garrison"), 0o700, "the state directory");
    assert_eq!(mode("etc/garrison/env.example"), 0o600, "the env template");

    let version = must(
        "garrison --version",
        in_root(&root, &["garrison", "--version"]).output(),
    );
    let version = String::from_utf8_lossy(&version.stdout);
    assert!(
        version.starts_with(concat!("garrison ", env!("CARGO_PKG_VERSION"), " (commit ")),
        "{version}"
    );

    // Doctor's verdict depends on the host (no token here: a problem it
    // reports); what matters is that it runs and answers in JSON.
    let doctor = in_root(
        &root,
        &["garrison", "doctor", "--backend", "host", "--json"],
    )
    .output()
    .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&doctor.stdout).unwrap_or_else(|e| {
        panic!(
            "doctor did not answer in JSON ({e}, {}):\n{}\n{}",
            doctor.status,
            String::from_utf8_lossy(&doctor.stdout),
            String::from_utf8_lossy(&doctor.stderr)
        )
    });
    assert!(report.is_object(), "{report}");

    // Remove: the binary goes; the configuration (a conffile) and the state
    // directory stay.
    std::fs::write(root.join("var/lib/garrison/garrison.db"), b"state").unwrap();
    must(
        "dpkg --remove",
        in_root(&root, &["dpkg", "--remove", "garrison"]).output(),
    );
    assert!(!root.join("usr/bin/garrison").exists());
    assert!(!root.join("lib/systemd/system/garrison.service").exists());
    assert!(root.join("etc/garrison/garrison.toml").exists());
    assert!(root.join("var/lib/garrison/garrison.db").exists());

    // Purge: the configuration goes, the state directory is kept and said so.
    let purge = must(
        "dpkg --purge",
        in_root(&root, &["dpkg", "--purge", "garrison"]).output(),
    );
    let said = String::from_utf8_lossy(&purge.stdout).into_owned()
        + &String::from_utf8_lossy(&purge.stderr);
    assert!(!root.join("etc/garrison/garrison.toml").exists());
    assert!(
        !root.join("etc/garrison").exists(),
        "an empty /etc/garrison is removed"
    );
    assert!(root.join("var/lib/garrison/garrison.db").exists());
    assert!(said.contains("kept /var/lib/garrison"), "{said}");
}
