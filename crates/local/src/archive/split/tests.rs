use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::super::{PackLimits, pack, unpack as unpack_or_fall_back};
use super::*;

const LIMITS: PackLimits = PackLimits {
    max_bytes: 256 << 20,
    max_time: Duration::from_secs(300),
};

/// A time bound no test comes near.
fn dog() -> Watchdog {
    Watchdog::start(Duration::from_secs(3600)).unwrap()
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

fn set_xattr(path: &Path, name: &std::ffi::CStr, value: &[u8]) -> bool {
    let path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: valid C strings and a buffer of the length given.
    unsafe {
        libc::lsetxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        ) == 0
    }
}

fn xattrs(path: &Path) -> BTreeMap<String, Vec<u8>> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let mut names = vec![0u8; 4096];
    // SAFETY: valid C string and a buffer of the length given.
    let n = unsafe { libc::llistxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    let mut found = BTreeMap::new();
    if n <= 0 {
        return found;
    }
    for name in names[..n as usize]
        .split(|&b| b == 0)
        .filter(|n| !n.is_empty())
    {
        let cname = std::ffi::CString::new(name).unwrap();
        let mut value = vec![0u8; 4096];
        // SAFETY: as above.
        let len = unsafe {
            libc::lgetxattr(
                c.as_ptr(),
                cname.as_ptr(),
                value.as_mut_ptr().cast(),
                value.len(),
            )
        };
        value.truncate(len.max(0) as usize);
        found.insert(String::from_utf8_lossy(name).into_owned(), value);
    }
    found
}

/// Everything a restore must bring back, per path: kind, mode, owner,
/// mtime, size, content, link target, device number, hard-link count and
/// extended attributes.
fn manifest(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let kind = meta.file_type();
            let mut line = format!(
                "mode {:o} owner {}:{} xattrs {:?}",
                meta.mode(),
                meta.uid(),
                meta.gid(),
                xattrs(&path)
            );
            if kind.is_symlink() {
                line += &format!(" -> {:?}", std::fs::read_link(&path).unwrap());
            } else {
                line += &format!(" mtime {}.{:09}", meta.mtime(), meta.mtime_nsec());
            }
            if kind.is_file() {
                let digest = Sha256::digest(std::fs::read(&path).unwrap());
                line += &format!(" size {} nlink {} sha {digest:x}", meta.len(), meta.nlink());
            }
            if !kind.is_file() && !kind.is_dir() && !kind.is_symlink() {
                line += &format!(" rdev {}", meta.rdev());
            }
            if kind.is_dir() {
                stack.push(path.clone());
            }
            out.insert(path.strip_prefix(root).unwrap().to_owned(), line);
        }
    }
    out
}

/// A layer with one of everything: files in many directories, a long name,
/// a sparse and an empty file, owners, modes, a read-only directory,
/// symbolic and hard links, a FIFO, a whiteout, extended attributes.
fn fill(upper: &Path) {
    for d in 0..12 {
        let dir = upper.join(format!("src/pkg{d}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..40 {
            let bytes: Vec<u8> = (0..(f * 97 + d) % 3000)
                .map(|i| (i * 7 + f) as u8)
                .collect();
            std::fs::write(dir.join(format!("file{f}.rs")), bytes).unwrap();
        }
    }
    let long = upper.join(format!("src/{}", "n".repeat(150)));
    std::fs::write(&long, b"long name").unwrap();
    std::fs::write(upper.join("empty"), b"").unwrap();
    let sparse = std::fs::File::create(upper.join("sparse")).unwrap();
    sparse.set_len(16 << 20).unwrap();
    std::os::unix::fs::FileExt::write_at(&sparse, b"tail", (16 << 20) - 4).unwrap();
    std::fs::create_dir(upper.join("locked")).unwrap();
    std::fs::write(upper.join("locked/inside"), b"kept").unwrap();
    std::fs::set_permissions(upper.join("locked"), std::fs::Permissions::from_mode(0o555)).unwrap();
    std::fs::set_permissions(
        upper.join("src/pkg1/file1.rs"),
        std::fs::Permissions::from_mode(0o4750),
    )
    .unwrap();
    symlink("/etc/hostname", upper.join("absolute-link")).unwrap();
    symlink("../pkg0/file0.rs", upper.join("src/pkg2/relative-link")).unwrap();
    std::fs::hard_link(upper.join("src/pkg3/file3.rs"), upper.join("hard-link")).unwrap();
    nix::unistd::mkfifo(
        &upper.join("fifo"),
        nix::sys::stat::Mode::from_bits_truncate(0o640),
    )
    .unwrap();
    set_xattr(&upper.join("src/pkg4/file4.rs"), c"user.note", b"kept");
    if is_root() {
        std::os::unix::fs::lchown(upper.join("src/pkg5"), Some(1000), Some(1001)).unwrap();
        std::os::unix::fs::lchown(upper.join("src/pkg5/file5.rs"), Some(1000), Some(1001)).unwrap();
        // What overlayfs leaves for a deleted lower file, and a directory
        // that hides the lower one.
        nix::sys::stat::mknod(
            &upper.join("deleted"),
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::empty(),
            0,
        )
        .unwrap();
        set_xattr(&upper.join("src/pkg6"), c"trusted.overlay.opaque", b"y");
    }
    // Directory times last, deepest first: files written later bump them.
    let old = filetime::FileTime::from_unix_time(1_600_000_000, 123_456_789);
    for dir in ["src/pkg0", "src/pkg7", "src", "locked"] {
        filetime::set_file_mtime(upper.join(dir), old).unwrap();
    }
}

async fn packed(upper: &Path, into: &Path) -> PathBuf {
    let archive = into.join("snap.tar.zst");
    pack(upper, ".garrison", &archive, LIMITS).await.unwrap();
    archive
}

fn fresh_dir(parent: &Path, name: &str) -> PathBuf {
    let dir = parent.join(name);
    std::fs::create_dir(&dir).unwrap();
    dir
}

#[tokio::test]
async fn a_layer_of_every_kind_comes_back_exactly_from_several_workers() {
    let scratch = tempfile::tempdir().unwrap();
    let upper = fresh_dir(scratch.path(), "upper");
    fill(&upper);
    let archive = packed(&upper, scratch.path()).await;
    for workers in [1, 3] {
        let restored = fresh_dir(scratch.path(), &format!("restored-{workers}"));
        unpack(&archive, &restored, scratch.path(), workers, &dog()).unwrap();
        let (want, got) = (manifest(&upper), manifest(&restored));
        for (path, line) in &want {
            assert_eq!(
                got.get(path),
                Some(line),
                "{} with {workers} workers",
                path.display()
            );
        }
        let extra: Vec<_> = got.keys().filter(|k| !want.contains_key(*k)).collect();
        assert!(
            extra.is_empty(),
            "with {workers} workers, more than was packed: {extra:?}"
        );
        let sparse = std::fs::metadata(restored.join("sparse")).unwrap();
        assert!(
            sparse.blocks() * 512 < 1 << 20,
            "sparse file restored dense"
        );
    }
    let leftovers: Vec<_> = std::fs::read_dir(scratch.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().starts_with("restore-"))
        .collect();
    assert!(leftovers.is_empty(), "spool files left: {leftovers:?}");
}

fn compressed(tar: &[u8], into: &Path) -> PathBuf {
    let archive = into.join("crafted.tar.zst");
    std::fs::write(&archive, zstd::encode_all(tar, 3).unwrap()).unwrap();
    archive
}

/// A symbolic link to a directory outside, then a file "under" it: the
/// shape that would write outside the layer if the link were made first.
fn escaping_archive(outside: &Path) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    let mut link = tar::Header::new_ustar();
    link.set_entry_type(tar::EntryType::Symlink);
    link.set_size(0);
    link.set_mode(0o777);
    builder.append_link(&mut link, "escape", outside).unwrap();
    for name in ["escape/planted", "ok/file"] {
        let mut file = tar::Header::new_ustar();
        file.set_size(6);
        file.set_mode(0o644);
        builder
            .append_data(&mut file, name, &b"planted"[..6])
            .unwrap();
    }
    builder.into_inner().unwrap()
}

#[tokio::test]
async fn a_link_in_the_archive_never_leads_a_write_outside() {
    let scratch = tempfile::tempdir().unwrap();
    let outside = fresh_dir(scratch.path(), "outside");
    let archive = compressed(&escaping_archive(&outside), scratch.path());

    let upper = fresh_dir(scratch.path(), "upper");
    let _ = unpack(&archive, &upper, scratch.path(), 2, &dog());
    let upper = fresh_dir(scratch.path(), "upper-again");
    let _ = unpack_or_fall_back(&archive, &upper, scratch.path()).await;
    let planted: Vec<_> = std::fs::read_dir(&outside).unwrap().collect();
    assert!(planted.is_empty(), "written outside the layer: {planted:?}");
}

#[tokio::test]
async fn an_archive_in_another_format_is_restored_by_one_tar() {
    let scratch = tempfile::tempdir().unwrap();
    let upper = fresh_dir(scratch.path(), "upper");
    let sparse = std::fs::File::create(upper.join("sparse")).unwrap();
    sparse.set_len(8 << 20).unwrap();
    std::os::unix::fs::FileExt::write_at(&sparse, b"tail", (8 << 20) - 4).unwrap();
    std::fs::write(upper.join("l".repeat(120)), b"long").unwrap();
    // The old format keeps whole seconds only.
    let second = filetime::FileTime::from_unix_time(1_600_000_000, 0);
    for name in ["sparse".to_owned(), "l".repeat(120)] {
        filetime::set_file_mtime(upper.join(name), second).unwrap();
    }
    // Old GNU format: sparse ('S') and long-name ('L') headers.
    let tar = Command::new("tar")
        .args(["--format=gnu", "--sparse", "-C"])
        .arg(&upper)
        .args(["-cf", "-", "."])
        .output()
        .unwrap();
    assert!(tar.status.success());
    let archive = compressed(&tar.stdout, scratch.path());

    let split = unpack(
        &archive,
        &fresh_dir(scratch.path(), "split"),
        scratch.path(),
        2,
        &dog(),
    );
    let err = format!("{:#}", split.unwrap_err());
    assert!(err.contains("'S'"), "{err}");
    let restored = fresh_dir(scratch.path(), "restored");
    unpack_or_fall_back(&archive, &restored, scratch.path())
        .await
        .unwrap();
    assert_eq!(manifest(&upper), manifest(&restored));
}

/// The split stops at an archive cut inside a member (GNU tar itself lets
/// some such cuts pass, which is why the store checks every archive's hash
/// before a restore); a cut compressed stream fails either way.
#[tokio::test]
async fn an_archive_cut_short_is_refused() {
    let scratch = tempfile::tempdir().unwrap();
    let upper = fresh_dir(scratch.path(), "upper");
    for i in 0..50 {
        std::fs::write(upper.join(format!("f{i}")), vec![b'x'; 5000]).unwrap();
    }
    let tar = Command::new("tar")
        .args(["--format=posix", "-C"])
        .arg(&upper)
        .args(["-cf", "-", "."])
        .output()
        .unwrap();
    let cut_tar = compressed(&tar.stdout[..tar.stdout.len() / 2 + 100], scratch.path());
    let split = unpack(
        &cut_tar,
        &fresh_dir(scratch.path(), "split"),
        scratch.path(),
        2,
        &dog(),
    );
    assert!(split.is_err());

    let whole = zstd::encode_all(&tar.stdout[..], 3).unwrap();
    let cut_stream = scratch.path().join("cut.tar.zst");
    std::fs::write(&cut_stream, &whole[..whole.len() / 2]).unwrap();
    let restored = fresh_dir(scratch.path(), "restored");
    assert!(
        unpack_or_fall_back(&cut_stream, &restored, scratch.path())
            .await
            .is_err()
    );
}

#[test]
fn sizes_are_read_in_octal_and_base_256() {
    let mut header = [0u8; BLOCK];
    header[124..136].copy_from_slice(b"00000001750\0");
    assert_eq!(number(&header[124..136]).unwrap(), 1000);
    header[124..136].copy_from_slice(&[0x80, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0]);
    assert_eq!(number(&header[124..136]).unwrap(), 2 << 16);
    header[124..136].copy_from_slice(&[0xff; 12]);
    assert!(number(&header[124..136]).is_err());
}

#[test]
fn pax_records_give_the_size_and_name() {
    let mut next = Pending::default();
    next.pax(b"20 path=a/long/name\n15 size=123456\n13 mtime=1.5\n")
        .unwrap();
    assert_eq!(next.size, Some(123_456));
    assert_eq!(next.name.as_deref(), Some(&b"a/long/name"[..]));
    for bad in [&b"99 path=x\n"[..], b"5 x=y\n", b"nonsense"] {
        assert!(Pending::default().pax(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn files_of_one_directory_and_owner_kind_share_a_worker() {
    let scratch = tempfile::tempdir().unwrap();
    let upper = fresh_dir(scratch.path(), "upper");
    let dog = dog();
    let mut pool = Pool::new(&upper, &dog, 2);
    let a = pool.home_of(b"./a/one", true).unwrap();
    assert_eq!(pool.home_of(b"./a/two", true).unwrap(), a);
    let b = pool.home_of(b"./b/one", true).unwrap();
    assert_ne!(a, b, "a second directory starts a second worker");
    pool.workers[a].dealt = 10;
    assert_eq!(
        pool.home_of(b"./c/one", true).unwrap(),
        b,
        "the least loaded"
    );
    let owned = pool.home_of(b"./a/three", false).unwrap();
    assert!(!pool.workers[owned].root_owned && pool.workers[a].root_owned);
    assert_eq!(pool.workers.len(), 3);
    for worker in pool.workers {
        worker.finish(&dog).unwrap();
    }
}

/// Workers that share a parent directory must never race to make it: in
/// every one of many restores, dozens of directories each hold files for
/// several workers (root's and another owner's, and one per subdirectory),
/// so each directory is wanted by more than one worker at once.
#[tokio::test]
async fn workers_sharing_a_parent_never_race_to_make_it() {
    let scratch = tempfile::tempdir().unwrap();
    let upper = fresh_dir(scratch.path(), "upper");
    for d in 0..48 {
        for sub in 0..4 {
            let dir = upper.join(format!("top{d}/sub{sub}"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("file"), b"x").unwrap();
        }
        std::fs::write(upper.join(format!("top{d}/beside")), b"y").unwrap();
        if is_root() {
            let other = upper.join(format!("top{d}/other"));
            std::fs::write(&other, b"z").unwrap();
            std::os::unix::fs::lchown(&other, Some(1000), Some(1000)).unwrap();
        }
    }
    let archive = packed(&upper, scratch.path()).await;
    let want = manifest(&upper);
    for round in 0..10 {
        let restored = fresh_dir(scratch.path(), &format!("restored-{round}"));
        unpack(&archive, &restored, scratch.path(), 4, &dog())
            .unwrap_or_else(|e| panic!("round {round}: {e:#}"));
        assert_eq!(manifest(&restored).len(), want.len(), "round {round}");
    }
}

/// The dealer, not a worker, makes the directories above each file (so no
/// two workers race to make one), never above `upper`.
#[test]
fn the_dealer_makes_each_files_parents_inside_upper_only() {
    let scratch = tempfile::tempdir().unwrap();
    let upper = fresh_dir(scratch.path(), "upper");
    let dog = dog();
    let mut pool = Pool::new(&upper, &dog, 1);
    pool.make_parents(b"./src/pkg/file.rs");
    pool.make_parents(b"/absolute/file");
    pool.make_parents(b"top-level-file");
    pool.make_parents(b"../escape/file");
    pool.make_parents(b"inner/../../escape/file");
    assert!(upper.join("src/pkg").is_dir());
    assert!(upper.join("absolute").is_dir());
    assert!(!scratch.path().join("escape").exists());
    assert!(!upper.join("inner").exists());
    assert!(pool.workers.is_empty(), "making parents starts no worker");
    let mut made: Vec<_> = std::fs::read_dir(&upper)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    made.sort();
    assert_eq!(made, ["absolute", "src"]);
}
