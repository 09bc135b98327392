//! The id range of each sandbox's user namespace (chosen at create, read
//! back from the sandbox's directory afterwards, freed on destroy), and the
//! place its container reaches its root from.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow};

use super::{IDS_FILE, LocalBackend, NETNS_FILE, USERNS_FILE};
use crate::userns::{self, IdRange};

impl LocalBackend {
    /// Chooses a free id range for sandbox `name`, records it in `dir` and
    /// makes its user namespace there, with the network namespace it owns.
    pub(super) async fn make_user_namespace(
        &self,
        name: &str,
        dir: &Path,
    ) -> anyhow::Result<IdRange> {
        let ids = {
            let mut slots = self.id_slots.lock().unwrap_or_else(|e| e.into_inner());
            let used = slots.get_or_insert_with(|| self.recorded_slots());
            let slot = sandbox::free_slot_for(name, used, userns::SLOTS)
                .ok_or_else(|| anyhow!("every user namespace id range is in use"))?;
            used.insert(slot);
            IdRange::of_slot(slot)
        };
        shim::write_atomically(&dir.join(IDS_FILE), ids.to_record().as_bytes())?;
        let (pin, network) = (dir.join(USERNS_FILE), dir.join(NETNS_FILE));
        tokio::task::spawn_blocking(move || userns::create(&pin, ids, Some(&network)))
            .await?
            .context("making the sandbox's user namespace")?;
        Ok(ids)
    }

    /// The ids sandbox directory `dir` recorded, if it runs in a user
    /// namespace.
    pub(super) fn recorded_ids(dir: &Path) -> Option<IdRange> {
        IdRange::from_record(&std::fs::read_to_string(dir.join(IDS_FILE)).ok()?)
    }

    /// Frees the range of a sandbox being torn down.
    pub(super) fn release_ids(&self, dir: &Path) {
        if let Some(slot) = Self::recorded_ids(dir).and_then(IdRange::slot) {
            let mut slots = self.id_slots.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(used) = slots.as_mut() {
                used.remove(&slot);
            }
        }
    }

    /// The ranges of every sandbox on this host, also those an earlier
    /// Garrison process made.
    fn recorded_slots(&self) -> BTreeSet<u32> {
        let Ok(entries) = std::fs::read_dir(self.config.root.join("sandboxes")) else {
            return BTreeSet::new();
        };
        entries
            .flatten()
            .filter_map(|entry| Self::recorded_ids(&entry.path()))
            .filter_map(IdRange::slot)
            .collect()
    }
}

/// Where the roots of user-namespaced containers are reachable: outside
/// the state directory, whose directories (often 0700, like a temporary
/// directory) the container's uid may not pass.
const REACHABLE_ROOTS: &str = "/run/garrison";

impl LocalBackend {
    /// `/run/garrison/<hash of this backend's state root>/<name>`, the
    /// directory holding the `rootfs` runc mounts for sandbox `name`.
    pub(super) fn reachable_dir(&self, name: &str) -> PathBuf {
        let state = sandbox::hashed_id(&self.config.root.to_string_lossy());
        Path::new(REACHABLE_ROOTS).join(state).join(name)
    }

    /// Binds sandbox `name`'s root (mounted at `dir/rootfs`) where its
    /// container's uid can reach it, and returns that path. Only root and the
    /// container's group may pass its directory.
    pub(super) fn expose_root(
        &self,
        name: &str,
        dir: &Path,
        ids: IdRange,
    ) -> anyhow::Result<PathBuf> {
        let own = self.reachable_dir(name);
        // Made first, so a concurrent `hide_root` cannot remove the shared
        // directory between its permissions being set and its use.
        std::fs::create_dir_all(own.join("rootfs"))?;
        // Passable by the sandboxes, listable by nobody but root.
        let shared = own.parent().context("a reachable root's parent")?;
        for ancestor in [Path::new(REACHABLE_ROOTS), shared] {
            std::fs::set_permissions(ancestor, std::fs::Permissions::from_mode(0o711))?;
        }
        std::os::unix::fs::chown(&own, Some(0), Some(ids.host_base))?;
        std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o710))?;
        nix::mount::mount(
            Some(&dir.join("rootfs")),
            &own.join("rootfs"),
            None::<&str>,
            nix::mount::MsFlags::MS_BIND,
            None::<&str>,
        )
        .with_context(|| format!("binding the sandbox's root at {}", own.display()))?;
        Ok(own.join("rootfs"))
    }

    /// Undoes [`Self::expose_root`]; nothing there is success.
    pub(super) fn hide_root(&self, name: &str) -> anyhow::Result<()> {
        let own = self.reachable_dir(name);
        crate::disk::unmount(&own.join("rootfs"))?;
        // The devices' nodes (see `devices`), if it had any.
        let nodes = own.join(super::devices::NODES_DIR);
        crate::disk::unmount(&nodes)?;
        match std::fs::remove_dir(&nodes) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(anyhow!(e).context(format!("removing {}", nodes.display())));
            }
            _ => {}
        }
        match std::fs::remove_dir(own.join("rootfs")).and_then(|()| std::fs::remove_dir(&own)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(anyhow!(e).context(format!("removing {}", own.display())));
            }
            _ => {}
        }
        // The backend's directory goes with its last sandbox (refused while
        // another is in it).
        if let Some(shared) = own.parent() {
            let _ = std::fs::remove_dir(shared);
        }
        Ok(())
    }
}
