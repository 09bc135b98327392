//! Imports of synthetic images: two layers with a whiteout, an opaque
//! directory, a replaced directory, symlinks and hard links; as a
//! `docker save` tarball and as an OCI layout (directory and tar); and
//! hostile layers that try to escape the root.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use sha2::{Digest, Sha256};
use tar::{EntryType, Header};

use super::super::{ImageStore, NoProgress};

/// One tar entry of a synthetic layer.
enum E<'a> {
    Dir(&'a str, u32),
    File(&'a str, u32, &'a str),
    Link(&'a str, &'a str),
    Hard(&'a str, &'a str),
}

fn layer(entries: &[E]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for entry in entries {
        let mut header = Header::new_gnu();
        header.set_mtime(1_700_000_000);
        header.set_uid(1000);
        header.set_gid(1000);
        let (path, data): (&str, &[u8]) = match entry {
            E::Dir(path, mode) => {
                header.set_entry_type(EntryType::Directory);
                header.set_mode(*mode);
                (path, b"")
            }
            E::File(path, mode, content) => {
                header.set_entry_type(EntryType::Regular);
                header.set_mode(*mode);
                (path, content.as_bytes())
            }
            E::Link(path, target) | E::Hard(path, target) => {
                let kind = match entry {
                    E::Link(..) => EntryType::Symlink,
                    _ => EntryType::Link,
                };
                header.set_entry_type(kind);
                header.set_mode(0o777);
                raw_name(&mut header, true, target);
                (path, b"")
            }
        };
        header.set_size(data.len() as u64);
        raw_name(&mut header, false, path);
        header.set_cksum();
        builder.append(&header, data).unwrap();
    }
    builder.into_inner().unwrap()
}

/// Writes a name into the header as is: the tar crate's setters refuse
/// `..`, and hostile layers need it.
fn raw_name(header: &mut Header, link: bool, name: &str) {
    let old = header.as_old_mut();
    let field: &mut [u8] = if link {
        &mut old.linkname
    } else {
        &mut old.name
    };
    field.fill(0);
    field[..name.len()].copy_from_slice(name.as_bytes());
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

fn zstd(data: &[u8]) -> Vec<u8> {
    zstd::encode_all(data, 3).unwrap()
}

fn sha256(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// A tar of whole files (the outer archive of `docker save`).
fn archive(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, data) in files {
        let mut header = Header::new_gnu();
        header.set_mode(0o644);
        header.set_size(data.len() as u64);
        builder.append_data(&mut header, path, *data).unwrap();
    }
    builder.into_inner().unwrap()
}

fn lower() -> Vec<u8> {
    layer(&[
        E::Dir("etc", 0o755),
        E::File("etc/a", 0o644, "a1"),
        E::File("etc/b", 0o600, "b1"),
        E::Hard("etc/a-hard", "etc/a"),
        E::Dir("opq", 0o755),
        E::File("opq/old", 0o644, "old"),
        E::Dir("opq/sub", 0o755),
        E::File("opq/sub/deep", 0o644, "deep"),
        E::Dir("keep", 0o755),
        E::File("keep/x", 0o644, "x"),
        E::Dir("usr/lib", 0o755),
        E::File("usr/lib/libz", 0o644, "z"),
        E::Link("lib", "usr/lib"),
        E::File("bin/tool", 0o4755, "#!/bin/sh\n"),
    ])
}

fn upper() -> Vec<u8> {
    layer(&[
        E::File("etc/.wh.b", 0o644, ""),
        E::File("etc/a", 0o644, "a2"),
        E::Dir("opq", 0o750),
        E::File("opq/.wh..wh..opq", 0o644, ""),
        E::Dir("opq/sub", 0o755),
        E::File("opq/sub/new", 0o644, "new"),
        E::File("keep", 0o644, "now a file"),
        // Through the symlink lib -> usr/lib.
        E::File("lib/extra", 0o644, "extra"),
        // The aufs hard-link directory: ignored.
        E::File(".wh..wh.plnk", 0o644, ""),
    ])
}

/// Path → "d mode", "f mode content" or "l target" for the whole tree.
fn tree(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let rel = path
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let meta = fs::symlink_metadata(&path).unwrap();
        let mode = meta.permissions().mode() & 0o7777;
        let value = if meta.file_type().is_symlink() {
            format!("l {}", fs::read_link(&path).unwrap().display())
        } else if meta.is_dir() {
            walk(root, &path, out);
            format!("d {mode:o}")
        } else {
            format!("f {mode:o} {}", fs::read_to_string(&path).unwrap())
        };
        out.insert(rel, value);
    }
}

fn expected() -> BTreeMap<String, String> {
    [
        ("bin", "d 755"),
        ("bin/tool", "f 4755 #!/bin/sh\n"),
        ("etc", "d 755"),
        ("etc/a", "f 644 a2"),
        ("etc/a-hard", "f 644 a1"),
        ("etc/garrison-image.json", ""),
        ("keep", "f 644 now a file"),
        ("lib", "l usr/lib"),
        ("opq", "d 750"),
        ("opq/sub", "d 755"),
        ("opq/sub/new", "f 644 new"),
        ("usr", "d 755"),
        ("usr/lib", "d 755"),
        ("usr/lib/extra", "f 644 extra"),
        ("usr/lib/libz", "f 644 z"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

fn check_tree(root: &Path) {
    let mut got = tree(root);
    // Written by Garrison; its content is checked elsewhere.
    got.insert("etc/garrison-image.json".into(), String::new());
    assert_eq!(got, expected());
    let a_hard = fs::metadata(root.join("etc/a-hard")).unwrap();
    assert_eq!(
        a_hard.nlink(),
        1,
        "etc/a was replaced: the hard link keeps a1"
    );
    if nix::unistd::geteuid().is_root() {
        assert_eq!(fs::metadata(root.join("etc/a")).unwrap().uid(), 1000);
        assert_eq!(fs::symlink_metadata(root.join("lib")).unwrap().gid(), 1000);
    }
    let mtime = fs::metadata(root.join("usr/lib/libz")).unwrap().mtime();
    assert_eq!(mtime, 1_700_000_000);
}

fn docker_save(layers: &[Vec<u8>]) -> Vec<u8> {
    let manifest = serde_json::json!([{
        "Config": "config.json",
        "RepoTags": ["test:latest"],
        "Layers": (0..layers.len()).map(|i| format!("l{i}/layer.tar")).collect::<Vec<_>>(),
    }])
    .to_string();
    let mut files: Vec<(String, Vec<u8>)> = vec![
        ("manifest.json".into(), manifest.into_bytes()),
        ("config.json".into(), b"{}".to_vec()),
    ];
    for (i, data) in layers.iter().enumerate() {
        files.push((format!("l{i}/layer.tar"), data.clone()));
    }
    let refs: Vec<(&str, &[u8])> = files
        .iter()
        .map(|(p, d)| (p.as_str(), d.as_slice()))
        .collect();
    archive(&refs)
}

/// Writes an OCI layout for `layers` (already compressed) into `dir`.
fn oci_layout(dir: &Path, layers: &[Vec<u8>]) {
    let blobs = dir.join("blobs/sha256");
    fs::create_dir_all(&blobs).unwrap();
    let put = |data: &[u8]| {
        let hex = sha256(data);
        fs::write(blobs.join(&hex), data).unwrap();
        format!("sha256:{hex}")
    };
    let config = put(b"{}");
    let layer_descs: Vec<_> = layers
        .iter()
        .map(|data| {
            serde_json::json!({
                "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": put(data),
                "size": data.len(),
            })
        })
        .collect();
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config, "size": 2},
        "layers": layer_descs,
    })
    .to_string();
    let manifest_digest = put(manifest.as_bytes());
    // A multi-platform index: an attestation first, then our platform.
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let index = serde_json::json!({
        "schemaVersion": 2,
        "manifests": [
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": config, "size": 2,
             "platform": {"architecture": "unknown", "os": "unknown"}},
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifest_digest,
             "size": manifest.len(), "platform": {"architecture": arch, "os": "linux"}},
        ],
    });
    fs::write(dir.join("index.json"), index.to_string()).unwrap();
    fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
}

#[tokio::test]
async fn docker_save_tarball() {
    let dir = tempfile::tempdir().unwrap();
    let store = ImageStore::open(&dir.path().join("images")).unwrap();
    let file = dir.path().join("image.tar");
    fs::write(&file, docker_save(&[gzip(&lower()), upper()])).unwrap();
    let image = store.import("test", &file, &NoProgress).await.unwrap();
    check_tree(&image.rootfs);
    assert_eq!(image.source, "import:image.tar");
    assert_eq!(image.name, "test");
    assert_eq!(image.chrome_path, None);
    assert!(image.size_bytes > 0);
    let info: serde_json::Value =
        serde_json::from_slice(&fs::read(image.rootfs.join("etc/garrison-image.json")).unwrap())
            .unwrap();
    assert_eq!(info["name"], "test");

    // The same layers again: same id, stored once, under a second name.
    let again = store.import("again", &file, &NoProgress).await.unwrap();
    assert_eq!(again.id, image.id);
    assert_eq!(store.list().unwrap().len(), 2);
}

#[tokio::test]
async fn oci_layout_directory_and_tarball() {
    let dir = tempfile::tempdir().unwrap();
    let store = ImageStore::open(&dir.path().join("images")).unwrap();
    let layout = dir.path().join("layout");
    oci_layout(&layout, &[gzip(&lower()), zstd(&upper())]);
    let from_dir = store.import("oci", &layout, &NoProgress).await.unwrap();
    check_tree(&from_dir.rootfs);

    // The same layout as a tar: the same image.
    let mut files = Vec::new();
    for path in ["index.json", "oci-layout"] {
        files.push((path.to_owned(), fs::read(layout.join(path)).unwrap()));
    }
    for entry in fs::read_dir(layout.join("blobs/sha256")).unwrap() {
        let entry = entry.unwrap();
        let name = format!("blobs/sha256/{}", entry.file_name().to_string_lossy());
        files.push((name, fs::read(entry.path()).unwrap()));
    }
    let refs: Vec<(&str, &[u8])> = files
        .iter()
        .map(|(p, d)| (p.as_str(), d.as_slice()))
        .collect();
    let tarball = dir.path().join("oci.tar.zst");
    fs::write(&tarball, zstd(&archive(&refs))).unwrap();
    let from_tar = store.import("oci2", &tarball, &NoProgress).await.unwrap();
    assert_eq!(from_tar.id, from_dir.id);
    check_tree(&from_tar.rootfs);
}

#[tokio::test]
async fn corrupt_layer_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = ImageStore::open(&dir.path().join("images")).unwrap();
    let layout = dir.path().join("layout");
    oci_layout(&layout, &[gzip(&lower())]);
    let blob = layout.join("blobs/sha256").join(sha256(&gzip(&lower())));
    fs::write(&blob, gzip(&upper())).unwrap();
    let err = format!(
        "{:#}",
        store.import("bad", &layout, &NoProgress).await.unwrap_err()
    );
    assert!(err.contains("corrupt"), "{err}");
    assert!(store.list().unwrap().is_empty());
    assert_eq!(
        fs::read_dir(dir.path().join("images/tmp")).unwrap().count(),
        0
    );
}

#[tokio::test]
async fn traversal_is_refused() {
    for (what, hostile) in [
        ("dotdot", layer(&[E::File("../escaped", 0o644, "x")])),
        (
            "nested dotdot",
            layer(&[E::Dir("a", 0o755), E::File("a/../../escaped", 0o644, "x")]),
        ),
        (
            "hard link",
            layer(&[E::Hard("passwd", "../../../../etc/passwd")]),
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let store = ImageStore::open(&dir.path().join("images")).unwrap();
        let file = dir.path().join("image.tar");
        fs::write(&file, docker_save(&[hostile])).unwrap();
        let err = format!(
            "{:#}",
            store.import("x", &file, &NoProgress).await.unwrap_err()
        );
        assert!(err.contains("refusing"), "{what}: {err}");
        assert!(!dir.path().join("escaped").exists(), "{what}");
        assert!(store.list().unwrap().is_empty(), "{what}");
    }
}

#[tokio::test]
async fn symlinks_resolve_inside_the_root() {
    let dir = tempfile::tempdir().unwrap();
    let outside = dir.path().join("outside");
    fs::create_dir(&outside).unwrap();
    let store = ImageStore::open(&dir.path().join("images")).unwrap();
    let absolute = outside.to_string_lossy().into_owned();
    let relative = format!("../../../../../../../..{absolute}");
    let file = dir.path().join("image.tar");
    fs::write(
        &file,
        docker_save(&[
            layer(&[E::Link("abs", &absolute), E::Link("rel", &relative)]),
            layer(&[
                E::File("abs/pwned", 0o644, "x"),
                E::File("rel/pwned2", 0o644, "x"),
            ]),
        ]),
    )
    .unwrap();
    let image = store.import("x", &file, &NoProgress).await.unwrap();
    assert_eq!(
        fs::read_dir(&outside).unwrap().count(),
        0,
        "nothing written outside"
    );
    // Both links lead to the same directory inside the root.
    let inside = image.rootfs.join(absolute.trim_start_matches('/'));
    assert!(inside.join("pwned").is_file());
    assert!(inside.join("pwned2").is_file());
}
