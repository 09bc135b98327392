//! The default image that `scripts/setup` builds with mmdebstrap resolves
//! and has what `devin-remote` needs. (Building one takes ~20 s and the
//! network, so `cargo test` never builds; setup does, once.)

use std::path::PathBuf;

use local::images::{DEFAULT_IMAGE, ImageStore};

#[test]
fn default_image_has_git_and_a_shell() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: the default image is built by scripts/setup as root");
        return;
    }
    let Some(root) = std::env::var_os("GARRISON_TEST_IMAGES").map(PathBuf::from) else {
        eprintln!("skipped: GARRISON_TEST_IMAGES is unset (scripts/test sets it)");
        return;
    };
    let store = ImageStore::open(&root).unwrap();
    let image = store
        .resolve(DEFAULT_IMAGE)
        .unwrap_or_else(|err| panic!("{err:#} (scripts/setup builds it)"));
    for path in ["usr/bin/git", "bin/sh", "etc/garrison-image.json"] {
        assert!(
            image.rootfs.join(path).exists(),
            "{path} missing from {}",
            image.rootfs.display()
        );
    }
    assert!(image.id.starts_with("sha256-"));
    assert!(image.source.starts_with("recipe:"));
    // Resolving by id finds the same tree.
    assert_eq!(store.resolve(&image.id).unwrap(), image);
}
