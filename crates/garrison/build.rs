//! Records the commit the binary is built from, for `garrison --version`:
//! `GARRISON_COMMIT` when set (a package built from a source tarball), else
//! git's HEAD, else "unknown".

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (out.status.success() && !text.is_empty()).then_some(text)
}

fn main() {
    println!("cargo:rerun-if-env-changed=GARRISON_COMMIT");
    let commit = std::env::var("GARRISON_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=GARRISON_COMMIT={commit}");
    // A new commit moves the branch's ref (or HEAD itself when detached);
    // watching those rebuilds only this crate, and only then.
    let mut watched = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(branch);
    }
    for name in watched {
        // (A path that does not exist would make cargo rerun this always.)
        if let Some(path) = git(&["rev-parse", "--path-format=absolute", "--git-path", &name])
            .filter(|path| std::path::Path::new(path).exists())
        {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}
