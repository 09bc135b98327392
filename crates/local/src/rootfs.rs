//! File access inside a container's root filesystem, from the host.
//!
//! The agent is root in its container and can replace any directory with a
//! symlink to `/etc` or `/`. A plain host-side `open("<rootfs>/path")` would
//! follow it onto the host. Every access here goes through `openat2` with
//! `RESOLVE_IN_ROOT`, so symlinks and `..` resolve as they would inside the
//! container and never leave it.

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// An open container root.
pub struct Root {
    fd: OwnedFd,
    /// The host uid of the container's root when it runs in a user
    /// namespace: files the host makes here are made as that uid, so they
    /// belong to the container's root (and overlayfs over idmapped layers
    /// accepts them; see `idmap`).
    owner: Option<u32>,
}

/// A path as the container sees it: absolute, no `.` or `..`. Returned
/// without the leading `/`, ready for `openat2` relative to the root.
pub fn container_relative(path: &str) -> io::Result<PathBuf> {
    let p = Path::new(path);
    if !p.is_absolute() {
        return Err(invalid(format!("{path:?} is not an absolute path")));
    }
    let mut out = PathBuf::new();
    for component in p.components() {
        match component {
            Component::RootDir => {}
            Component::Normal(part) => out.push(part),
            _ => return Err(invalid(format!("{path:?} is not a plain path"))),
        }
    }
    if out.as_os_str().is_empty() {
        return Err(invalid("the root itself is not a file".to_owned()));
    }
    Ok(out)
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}

fn cstring(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| invalid("path contains a NUL byte".to_owned()))
}

impl Root {
    /// Opens a root whose new files are owned by the caller.
    pub fn open(root: &Path) -> io::Result<Self> {
        Self::open_as(root, None)
    }

    /// Opens a root whose new files are to be owned by host uid `owner`.
    pub fn open_as(root: &Path, owner: Option<u32>) -> io::Result<Self> {
        let c = cstring(root)?;
        // SAFETY: a valid NUL-terminated path; the result is checked.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            // SAFETY: fd was just opened and is owned by nobody else.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            owner,
        })
    }

    fn openat2(&self, relative: &Path, flags: i32, mode: u32) -> io::Result<OwnedFd> {
        let c = cstring(relative)?;
        // SAFETY: open_how is plain data; zeroed is its documented default.
        let mut how: libc::open_how = unsafe { std::mem::zeroed() };
        how.flags = (flags | libc::O_CLOEXEC) as u64;
        how.mode = if flags & libc::O_CREAT != 0 {
            mode as u64
        } else {
            0
        };
        how.resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;
        // SAFETY: the pointers are valid for the call; the size matches.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                self.fd.as_raw_fd(),
                c.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor from the kernel.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
    }

    /// Creates a directory and its parents (inside the root), mode `mode`.
    pub fn create_dir_all(&self, path: &str, mode: u32) -> io::Result<()> {
        let _as = crate::idmap::acting_as(self.owner)?;
        let relative = container_relative(path)?;
        let mut so_far = PathBuf::new();
        for part in relative.components() {
            let parent = if so_far.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                so_far.clone()
            };
            so_far.push(part);
            let dir = self.openat2(&parent, libc::O_PATH | libc::O_DIRECTORY, 0)?;
            let name = cstring(Path::new(part.as_os_str()))?;
            // SAFETY: valid descriptor and NUL-terminated name.
            let rc = unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode) };
            if rc < 0 {
                let err = io::Error::last_os_error();
                if err.kind() != io::ErrorKind::AlreadyExists {
                    return Err(err);
                }
            }
        }
        // What exists must be a directory, reached without leaving the root.
        self.openat2(&relative, libc::O_PATH | libc::O_DIRECTORY, 0)
            .map(drop)
    }

    /// Creates a directory that must not exist yet (parents must).
    pub fn create_dir_new(&self, path: &str, mode: u32) -> io::Result<()> {
        let _as = crate::idmap::acting_as(self.owner)?;
        let relative = container_relative(path)?;
        let (parent, name) = split(&relative)?;
        let dir = self.openat2(&parent, libc::O_PATH | libc::O_DIRECTORY, 0)?;
        let name = cstring(&name)?;
        // SAFETY: valid descriptor and NUL-terminated name.
        if unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Writes a file atomically (a temporary file, then a rename in the same
    /// directory) with `mode`.
    pub fn write(&self, path: &str, bytes: &[u8], mode: u32) -> io::Result<()> {
        let _as = crate::idmap::acting_as(self.owner)?;
        let relative = container_relative(path)?;
        let (parent, name) = split(&relative)?;
        let dir = self.openat2(&parent, libc::O_PATH | libc::O_DIRECTORY, 0)?;
        let tmp_name = format!(".{}.garrison-tmp", name.display());
        let tmp = cstring(Path::new(&tmp_name))?;
        let target = cstring(&name)?;
        // SAFETY: valid descriptor and names; the results are checked.
        unsafe {
            libc::unlinkat(dir.as_raw_fd(), tmp.as_ptr(), 0);
        }
        // SAFETY: as above; the result is checked.
        let fd = unsafe {
            libc::openat(
                dir.as_raw_fd(),
                tmp.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                mode,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fresh descriptor.
        let mut file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        file.write_all(bytes)?;
        file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode))?;
        drop(file);
        // SAFETY: valid descriptor and names.
        if unsafe {
            libc::renameat(
                dir.as_raw_fd(),
                tmp.as_ptr(),
                dir.as_raw_fd(),
                target.as_ptr(),
            )
        } < 0
        {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Opens a regular file for reading. The sandbox may have put anything
    /// at `path`: a symlink (refused, not followed, even within the root), a
    /// FIFO (opened without blocking, then refused), a device node (refused
    /// by the `nodev` mounts, and here). Never blocks.
    pub fn open_read(&self, path: &str) -> io::Result<File> {
        let relative = container_relative(path)?;
        let file = File::from(self.openat2(
            &relative,
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK,
            0,
        )?);
        if !file.metadata()?.file_type().is_file() {
            return Err(invalid(format!("{path:?} is not a regular file")));
        }
        Ok(file)
    }

    /// Reads a whole small file, at most `limit` bytes.
    pub fn read_small(&self, path: &str, limit: u64) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        self.open_read(path)?.take(limit).read_to_end(&mut out)?;
        Ok(out)
    }

    /// Connects to the Unix socket at `path` inside the root. The socket is
    /// first opened `O_PATH` (resolved in the root, a final link refused)
    /// and connected to through `/proc/self/fd`: a path-based connect
    /// would follow a link the sandbox put there to a socket of the host.
    pub fn connect_unix(&self, path: &str) -> io::Result<std::os::unix::net::UnixStream> {
        use std::os::unix::fs::FileTypeExt;
        let relative = container_relative(path)?;
        let fd = self.openat2(&relative, libc::O_PATH | libc::O_NOFOLLOW, 0)?;
        let file = File::from(fd);
        if !file.metadata()?.file_type().is_socket() {
            return Err(invalid(format!("{path:?} is not a socket")));
        }
        std::os::unix::net::UnixStream::connect(format!("/proc/self/fd/{}", file.as_raw_fd()))
    }

    /// Whether `path` exists inside the root (a link is not followed).
    pub fn exists(&self, path: &str) -> bool {
        container_relative(path)
            .and_then(|r| self.openat2(&r, libc::O_PATH, 0))
            .is_ok()
    }
}

fn split(relative: &Path) -> io::Result<(PathBuf, PathBuf)> {
    let name = relative
        .file_name()
        .ok_or_else(|| invalid("no file name".to_owned()))?;
    let parent = relative
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map(Path::to_path_buf);
    Ok((
        parent.unwrap_or_else(|| PathBuf::from(".")),
        PathBuf::from(name),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_must_be_absolute_and_plain() {
        assert_eq!(container_relative("/a/b").unwrap(), PathBuf::from("a/b"));
        // An inner `.` names the same path and is dropped by the parser.
        assert_eq!(container_relative("/a/./b").unwrap(), PathBuf::from("a/b"));
        for bad in ["a/b", "/a/../b", "/", ""] {
            assert!(container_relative(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn connect_unix_reaches_a_socket_in_the_root_but_never_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let _inside = std::os::unix::net::UnixListener::bind(dir.path().join("sock")).unwrap();
        let host_sock = outside.path().join("host.sock");
        let _host = std::os::unix::net::UnixListener::bind(&host_sock).unwrap();
        std::os::unix::fs::symlink(&host_sock, dir.path().join("link")).unwrap();
        std::fs::write(dir.path().join("file"), b"x").unwrap();
        let root = Root::open(dir.path()).unwrap();

        root.connect_unix("/sock").unwrap();
        for refused in ["/link", "/file", "/missing"] {
            assert!(root.connect_unix(refused).is_err(), "{refused}");
        }
    }

    #[test]
    fn reads_refuse_fifos_symlinks_and_directories_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("real"), b"ok").unwrap();
        nix::unistd::mkfifo(&dir.path().join("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        std::os::unix::fs::symlink("/real", dir.path().join("link")).unwrap();
        std::fs::create_dir(dir.path().join("dir")).unwrap();
        let root = Root::open(dir.path()).unwrap();

        assert_eq!(root.read_small("/real", 10).unwrap(), b"ok");
        // A FIFO without a writer would block a plain open forever.
        for refused in ["/fifo", "/link", "/dir"] {
            assert!(root.open_read(refused).is_err(), "{refused}");
            assert!(root.read_small(refused, 10).is_err(), "{refused}");
        }
    }

    #[test]
    fn symlinks_resolve_inside_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let root_path = dir.path().join("root");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(root_path.join("etc")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        // The agent points a directory at the host.
        std::os::unix::fs::symlink(&outside, root_path.join("escape")).unwrap();
        std::os::unix::fs::symlink("/etc", root_path.join("etclink")).unwrap();
        let root = Root::open(&root_path).unwrap();

        // Absolute symlink targets resolve against the container root.
        root.write("/etclink/hosts", b"inside", 0o644).unwrap();
        assert_eq!(
            std::fs::read(root_path.join("etc/hosts")).unwrap(),
            b"inside"
        );
        // A link to a host path resolves inside the root too: nothing is
        // written outside.
        let _ = root.create_dir_all("/escape/sub", 0o755);
        let _ = root.write("/escape/file", b"x", 0o644);
        assert!(
            std::fs::read_dir(&outside).unwrap().next().is_none(),
            "wrote through a symlink onto the host"
        );

        root.create_dir_all("/a/b/c", 0o700).unwrap();
        root.write("/a/b/c/f", b"data", 0o600).unwrap();
        assert_eq!(root.read_small("/a/b/c/f", 100).unwrap(), b"data");
        assert!(root.exists("/a/b"));
        assert!(root.create_dir_new("/a/b", 0o700).is_err(), "exists");
    }
}
