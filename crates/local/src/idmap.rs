//! Idmapped mounts: the image and the session's layer shown to a sandbox
//! in a user namespace with its ids shifted, while they stay unshifted on
//! disk (see `userns`).
//!
//! overlayfs itself cannot be idmapped, but its layers can: the overlay is
//! mounted over idmapped mounts of the image and of the session's disk.
//! overlayfs does its own work in the layers (copy-up, whiteouts, its work
//! directory) with the credentials of whoever mounted it, and a host id that
//! the idmapping cannot express (host root) is refused there with
//! EOVERFLOW. So the overlay is mounted, and the host later writes into it,
//! [`acting_as`] the sandbox's root: the host's own capabilities, with the
//! file system ids of the container's root.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

/// `struct mount_attr` of `mount_setattr(2)`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;
const OPEN_TREE_CLONE: libc::c_uint = 1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;

fn cstring(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

fn check(result: libc::c_long) -> io::Result<libc::c_long> {
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(result)
    }
}

/// Mounts a copy of the tree at `source` on `target` (a directory), its ids
/// mapped through the user namespace pinned at `userns`.
pub(crate) fn mount_idmapped(source: &Path, target: &Path, userns: &Path) -> io::Result<()> {
    let source_c = cstring(source)?;
    let target_c = cstring(target)?;
    let userns = File::open(userns)?;
    // SAFETY: valid NUL-terminated paths; the result is checked and owned.
    let tree = unsafe {
        let fd = check(libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            source_c.as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint,
        ))?;
        OwnedFd::from_raw_fd(fd as i32)
    };
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_IDMAP,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    let empty = c"";
    // SAFETY: `attr` is a valid mount_attr of the size passed; the detached
    // tree is ours until moved.
    unsafe {
        check(libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_EMPTY_PATH,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        ))?;
        check(libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_FDCWD,
            target_c.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        ))?;
    }
    Ok(())
}

/// This thread's file system ids set to `owner`'s, its effective
/// capabilities kept, until dropped. `None` changes nothing.
///
/// File system ids are per thread, so nothing else in the process is
/// affected; the guard must be dropped on the thread that made it (it is
/// neither `Send` nor held across an `.await`).
pub(crate) struct ActingAs {
    active: bool,
    _not_send: std::marker::PhantomData<*const ()>,
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// Raises this thread's effective capabilities to its permitted ones: a
/// change of fsuid away from 0 drops the file capabilities (DAC override,
/// chown, fowner...) that overlayfs needs for copy-up.
fn raise_effective() -> io::Result<()> {
    let mut header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: header and a two-element data array, as version 3 requires.
    unsafe {
        check(libc::syscall(
            libc::SYS_capget,
            &mut header,
            data.as_mut_ptr(),
        ))?;
        for d in &mut data {
            d.effective = d.permitted;
        }
        check(libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()))?;
    }
    Ok(())
}

/// See [`ActingAs`].
pub(crate) fn acting_as(owner: Option<u32>) -> io::Result<ActingAs> {
    let Some(id) = owner else {
        return Ok(ActingAs {
            active: false,
            _not_send: std::marker::PhantomData,
        });
    };
    // SAFETY: plain syscalls on this thread's credentials.
    unsafe {
        libc::setfsgid(id);
        libc::setfsuid(id);
    }
    let guard = ActingAs {
        active: true,
        _not_send: std::marker::PhantomData,
    };
    // setfsuid reports the old id whatever happens: read it back.
    // SAFETY: as above; -1 is the documented query.
    let now = unsafe { libc::setfsuid(u32::MAX) };
    if now as u32 != id {
        return Err(io::Error::other(format!("could not act as uid {id}")));
    }
    raise_effective()?;
    Ok(guard)
}

impl Drop for ActingAs {
    fn drop(&mut self) {
        if self.active {
            // Back to root: the kernel gives the file capabilities back.
            // SAFETY: as in `acting_as`.
            unsafe {
                libc::setfsuid(0);
                libc::setfsgid(0);
            }
        }
    }
}

/// Mounts overlayfs at `target` with `options`, acting as `owner` (see the
/// module's documentation). Always `nodev`: a device node made in the root
/// must not open a host device when the host reads the root.
pub(crate) fn mount_overlay_as(owner: Option<u32>, options: &str, target: &Path) -> io::Result<()> {
    let _as = acting_as(owner)?;
    nix::mount::mount(
        Some("overlay"),
        target,
        Some("overlay"),
        // No device nodes and no set-user-id gain from whatever a session
        // leaves in its layer.
        nix::mount::MsFlags::MS_NODEV | nix::mount::MsFlags::MS_NOSUID,
        Some(options),
    )
    .map_err(io::Error::from)
}
