//! The user namespace a sandbox's container runs in, so that its root is an
//! unprivileged uid on the host.
//!
//! Each sandbox gets its own range of [`IDS`] host ids: container uid and
//! gid `n` are host id `host_base + n`. The namespace is made by Garrison,
//! not by runc, and pinned by a bind mount of its `nsfs` file in the
//! sandbox's directory, for two reasons:
//!
//! - the network namespace must be *owned* by it: the kernel lets a user
//!   namespace mount `sysfs` only for a network namespace it owns, and
//!   Garrison makes and configures the network namespace before the
//!   container exists;
//! - the image and the session's layer are shown to the container through
//!   idmapped mounts (see `idmap`), which need the namespace as a file
//!   descriptor before the container starts.
//!
//! What is on disk is never shifted: a file the container's root writes is
//! stored as uid 0, so images, snapshots and restores are the same with and
//! without a user namespace, and a snapshot moves between hosts whose
//! sandboxes got different ranges.

use std::fs::File;
use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use anyhow::Context;
use nix::mount::{MsFlags, mount};
use nix::sched::CloneFlags;

/// Runs each container in a user namespace; see
/// [`LocalConfig::userns`](crate::LocalConfig::userns).
pub const USERNS_ENV: &str = "SANDBOX_USERNS";

/// Ids per sandbox: the 16-bit range images use (`nobody` is 65534).
pub const IDS: u32 = 65_536;
/// The first host id given to sandboxes. Far above the ids distributions
/// hand to users and `/etc/subuid` ranges (which start at 100,000).
pub const FIRST_HOST_ID: u32 = 1 << 30;
/// Ranges available: `FIRST_HOST_ID` up to 2^31, below the ids some tools
/// treat as negative.
pub const SLOTS: u32 = (1 << 30) / IDS;

/// The ids of one sandbox: container id `n` is host id `host_base + n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdRange {
    /// The host id of container id 0.
    pub host_base: u32,
}

impl IdRange {
    /// The range of slot `slot` (wrapping around the slots there are).
    pub fn of_slot(slot: u32) -> Self {
        Self {
            host_base: FIRST_HOST_ID + (slot % SLOTS) * IDS,
        }
    }

    /// The slot of this range, when it is one of the slots' ranges.
    pub fn slot(self) -> Option<u32> {
        let offset = self.host_base.checked_sub(FIRST_HOST_ID)?;
        (offset % IDS == 0 && offset / IDS < SLOTS).then_some(offset / IDS)
    }

    /// The line of `/proc/<pid>/uid_map` (and `gid_map`) that makes it.
    pub fn map_line(self) -> String {
        format!("0 {} {IDS}\n", self.host_base)
    }

    /// What is recorded in the sandbox's directory.
    pub fn to_record(self) -> String {
        format!("{}\n", self.host_base)
    }

    /// Reads a record; anything but a slot's base is refused, so a damaged
    /// file can never map a container onto host root.
    pub fn from_record(text: &str) -> Option<Self> {
        let range = Self {
            host_base: text.trim().parse().ok()?,
        };
        range.slot().map(|_| range)
    }
}

/// A process that only waits for its standard input to close: something
/// to hold a namespace open while Garrison writes its id maps and pins it.
fn holder(
    enter: impl FnMut() -> std::io::Result<()> + Send + Sync + 'static,
) -> anyhow::Result<Child> {
    let mut command = Command::new("cat");
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: the closure only makes namespace syscalls, which are
    // async-signal-safe, between fork and exec.
    unsafe { command.pre_exec(enter) };
    command
        .spawn()
        .context("starting a process to hold a namespace (is coreutils' cat installed?)")
}

fn release(mut child: Child) {
    drop(child.stdin.take());
    let _ = child.wait();
}

/// Binds `/proc/<pid>/ns/<kind>` onto `pin` (an existing file).
fn pin_namespace(pid: u32, kind: &str, pin: &Path) -> anyhow::Result<()> {
    let source = format!("/proc/{pid}/ns/{kind}");
    mount(
        Some(source.as_str()),
        pin,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .with_context(|| format!("pinning a {kind} namespace at {}", pin.display()))
}

/// Makes a user namespace with `range`'s maps and pins it at `pin`; with
/// `network`, also a network namespace owned by it (made in the same
/// `unshare`), pinned there (see [`publish_network`]).
pub fn create(pin: &Path, range: IdRange, network: Option<&Path>) -> anyhow::Result<()> {
    let mut flags = CloneFlags::CLONE_NEWUSER;
    for file in std::iter::once(pin).chain(network) {
        File::create(file).with_context(|| format!("creating {}", file.display()))?;
    }
    if network.is_some() {
        flags |= CloneFlags::CLONE_NEWNET;
    }
    let child = holder(move || nix::sched::unshare(flags).map_err(Into::into))?;
    let pid = child.id();
    let made = (|| {
        for map in ["uid_map", "gid_map"] {
            File::options()
                .write(true)
                .open(format!("/proc/{pid}/{map}"))
                .and_then(|mut f| f.write_all(range.map_line().as_bytes()))
                .with_context(|| format!("writing the user namespace's {map}"))?;
        }
        pin_namespace(pid, "user", pin)?;
        match network {
            Some(network) => pin_namespace(pid, "net", network),
            None => Ok(()),
        }
    })();
    release(child);
    made
}

/// Where `ip netns` keeps its namespaces.
const NETNS_RUN_DIR: &str = "/run/netns";

/// Makes the network namespace pinned at `pinned` known to `ip netns` as
/// `name` (at `/run/netns/<name>`), as `ip netns add` would a new one:
/// `/run/netns` is made a shared mount first, so the name reaches mount
/// namespaces made later.
pub fn publish_network(pinned: &Path, name: &str) -> anyhow::Result<()> {
    let run_dir = Path::new(NETNS_RUN_DIR);
    std::fs::create_dir_all(run_dir).context("creating /run/netns")?;
    let shared = || {
        mount(
            None::<&str>,
            run_dir,
            None::<&str>,
            MsFlags::MS_SHARED | MsFlags::MS_REC,
            None::<&str>,
        )
    };
    if shared().is_err() {
        // Not a mount point yet: make it one, as `ip netns add` does.
        mount(
            Some(run_dir),
            run_dir,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            None::<&str>,
        )
        .context("binding /run/netns onto itself")?;
        shared().context("making /run/netns a shared mount")?;
    }
    let target = run_dir.join(name);
    File::options()
        .write(true)
        .create_new(true)
        .open(&target)
        .with_context(|| format!("creating {}", target.display()))?;
    mount(
        Some(pinned),
        &target,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .with_context(|| {
        format!(
            "binding the sandbox's network namespace at {}",
            target.display()
        )
    })
}

/// Whether this machine can run sandboxes in user namespaces: makes one,
/// and an idmapped mount through it of a directory made under `scratch`
/// (the state directory, whose file system must support them).
pub fn probe(scratch: &Path) -> anyhow::Result<()> {
    let dir = scratch.join(format!(".userns-probe-{:016x}", rand::random::<u64>()));
    let (pin, source, target) = (dir.join("userns"), dir.join("source"), dir.join("target"));
    for d in [&source, &target] {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    let probed = create(&pin, IdRange::of_slot(0), None).and_then(|()| {
        let mapped = crate::idmap::mount_idmapped(&source, &target, &pin).with_context(|| {
            format!(
                "an idmapped mount on the file system of {}",
                scratch.display()
            )
        });
        if mapped.is_ok() {
            let _ = nix::mount::umount2(&target, nix::mount::MntFlags::MNT_DETACH);
        }
        let _ = nix::mount::umount2(&pin, nix::mount::MntFlags::MNT_DETACH);
        mapped
    });
    let _ = std::fs::remove_dir_all(&dir);
    probed
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn ranges_stay_between_2_30_and_2_31_and_never_overlap() {
        let first = IdRange::of_slot(0);
        let last = IdRange::of_slot(SLOTS - 1);
        assert_eq!(first.host_base, 1 << 30);
        assert_eq!(u64::from(last.host_base) + u64::from(IDS), 1 << 31);
        assert_eq!(IdRange::of_slot(SLOTS), first);
        assert_eq!(
            IdRange::of_slot(7).host_base - IdRange::of_slot(6).host_base,
            IDS
        );
        assert_eq!(first.map_line(), "0 1073741824 65536\n");
    }

    #[test]
    fn a_record_is_only_ever_a_slots_base() {
        let range = IdRange::of_slot(42);
        assert_eq!(IdRange::from_record(&range.to_record()), Some(range));
        for bad in ["0", "1", "1073741825", "2147483648", "-5", "", "root"] {
            assert_eq!(IdRange::from_record(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_slot_is_the_preferred_one_or_the_next_free() {
        use sandbox::first_free;
        let used = BTreeSet::from([3, 4, SLOTS - 1]);
        assert_eq!(first_free(&used, 2, SLOTS), Some(2));
        assert_eq!(first_free(&used, 3, SLOTS), Some(5));
        assert_eq!(first_free(&used, SLOTS - 1, SLOTS), Some(0));
        assert_eq!(first_free(&used, SLOTS + 2, SLOTS), Some(2));
        let full: BTreeSet<u32> = (0..SLOTS).collect();
        assert_eq!(first_free(&full, 0, SLOTS), None);
    }
}
