//! Builds `native/runsc_compat.c` into a shared object that the local
//! backend installs into runsc sandboxes (see `src/local/compat.rs`).

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let source = "native/runsc_compat.c";
    println!("cargo:rerun-if-changed={source}");
    println!("cargo:rerun-if-env-changed=CC");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"))
        .join("runsc_compat.so");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let status = Command::new(&cc)
        .args(["-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-o"])
        .arg(&out)
        .arg(source)
        .status()
        .unwrap_or_else(|e| panic!("running {cc} (scripts/setup installs build-essential): {e}"));
    assert!(status.success(), "{cc} failed to build {source}");
}
