//! A sandbox's life on the host: building it (the disk, the writable layer
//! restored from a snapshot, the overlay root, the network namespace and the
//! container) and tearing all of it down again, whether after a failed or
//! interrupted create or on destroy.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use anyhow::{Context, anyhow};

use super::{
    HANDLE_FILE, IDMAPPED_DISK_DIR, LOWER_DIR, LocalBackend, NET_FILE, NETNS_FILE, RUNTIME_FILE,
    USERNS_FILE, fatal,
};
use crate::oci::{self, ContainerConfig};
use crate::rootfs::Root;
use crate::runc::Runtime;
use crate::userns::IdRange;
use crate::{archive, compat, disk, idmap, net};
use sandbox::{Handle, Result, SandboxError, SandboxSpec, format};

impl LocalBackend {
    /// `Sandbox::create`. Remains of an interrupted create are removed
    /// first, and a build that fails is torn down, so no half-built sandbox
    /// is left behind.
    pub(super) async fn create_sandbox(&self, spec: &SandboxSpec) -> Result<Handle> {
        let dir = self.sandbox_dir(spec.name.as_str())?;
        if dir.join(HANDLE_FILE).exists() {
            return Err(fatal(anyhow!("sandbox {} exists already", spec.name)));
        }
        if self.remove_remains_of(spec.name.as_str()).await? {
            tracing::warn!(sandbox = %spec.name, "removed the remains of an interrupted create");
        }
        std::fs::create_dir_all(&dir).map_err(fatal)?;
        let built = match self.build(spec, &dir).await {
            Ok(handle) => self.start_desktop(&handle).await.map(|()| handle),
            Err(e) => Err(e),
        };
        match built {
            Ok(handle) => Ok(handle),
            Err(e) => {
                if let Err(cleanup) = self.teardown(spec.name.as_str(), &dir).await {
                    tracing::warn!(sandbox = %spec.name, error = %cleanup, "cleaning up a failed create");
                }
                match e.downcast::<SandboxError>() {
                    Ok(sandbox_error) => Err(sandbox_error),
                    Err(other) => Err(fatal(other)),
                }
            }
        }
    }

    /// `Sandbox::remove_remains`: a directory without a handle is a create
    /// that crashed before it recorded the handle; nothing ran in it
    /// (processes start only after the handle exists), but its container,
    /// network and mounts may be up.
    pub(super) async fn remove_remains_of(&self, name: &str) -> Result<bool> {
        let dir = self.sandbox_dir(name)?;
        if !dir.exists() || dir.join(HANDLE_FILE).exists() {
            return Ok(false);
        }
        self.teardown(name, &dir).await.map_err(fatal)?;
        Ok(true)
    }

    /// Tears down whatever exists of a sandbox: the container and the
    /// network (independent of each other, so together), then the disk.
    pub(super) async fn teardown(&self, name: &str, dir: &Path) -> anyhow::Result<()> {
        let init_pid = std::fs::read_to_string(dir.join("init.pid"))
            .ok()
            .and_then(|p| p.trim().parse().ok());
        let runc = self.runtime_of(name);
        let (container, network) =
            tokio::join!(runc.delete(name, init_pid), net::destroy(&self.net, name));
        container?;
        network.map_err(|e| anyhow!(e))?;
        self.hide_root(name)?;
        // The overlay first, then the layers it stands on, then the disk
        // below them, then the namespaces they were mapped through.
        for mount in [
            "rootfs",
            LOWER_DIR,
            IDMAPPED_DISK_DIR,
            "disk",
            NETNS_FILE,
            USERNS_FILE,
        ] {
            disk::unmount(&dir.join(mount))?;
        }
        self.release_ids(dir);
        // The handle goes first: a crash halfway leaves a directory `list`
        // no longer reports but the next destroy still removes.
        let _ = std::fs::remove_file(dir.join(HANDLE_FILE));
        let dir = dir.to_owned();
        tokio::task::spawn_blocking(move || match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        })
        .await??;
        Ok(())
    }

    /// The session's root filesystem: the size-limited disk, the writable
    /// layer (restored from the snapshot when there is one), the overlay
    /// mount, and Garrison's files inside it.
    async fn prepare_root(
        &self,
        spec: &SandboxSpec,
        dir: &Path,
        image_rootfs: &Path,
        ids: Option<IdRange>,
    ) -> anyhow::Result<Root> {
        disk::create(&dir.join("disk.img"), spec.resources.disk_mb).await?;
        disk::mount(&dir.join("disk.img"), &dir.join("disk")).await?;
        let upper = dir.join("disk").join("upper");
        std::fs::create_dir_all(&upper)?;
        std::fs::create_dir_all(dir.join("disk").join("work"))?;
        if let Some(snapshot) = &spec.restore_from {
            let fetched = self
                .snapshots
                .fetch(snapshot)
                .await
                .map_err(|e| anyhow!(e))?;
            if !fetched.path().exists() {
                return Err(anyhow!(SandboxError::Gone(format!(
                    "snapshot {}",
                    snapshot.id
                ))));
            }
            let unpacked = archive::unpack(fetched.path(), &upper, dir).await;
            fetched.release().await;
            unpacked.context("restoring the snapshot")?;
        }
        let owner = ids.map(|ids| ids.host_base);
        let (lower, layers) = match ids {
            None => (image_rootfs.to_owned(), dir.join("disk")),
            Some(_) => {
                let userns = dir.join(USERNS_FILE);
                let (lower, layers) = (dir.join(LOWER_DIR), dir.join(IDMAPPED_DISK_DIR));
                for (source, target) in [(image_rootfs, &lower), (&dir.join("disk"), &layers)] {
                    std::fs::create_dir_all(target)?;
                    idmap::mount_idmapped(source, target, &userns).with_context(|| {
                        format!(
                            "mounting {} for the sandbox's user namespace \
                             (the file system must support idmapped mounts; \
                             or turn user namespaces off with {})",
                            source.display(),
                            crate::userns::USERNS_ENV
                        )
                    })?;
                }
                (lower, layers)
            }
        };
        disk::mount_overlay(
            &lower,
            &layers.join("upper"),
            &layers.join("work"),
            &dir.join("rootfs"),
            owner,
        )
        .await?;

        let root = Root::open_as(&dir.join("rootfs"), owner)?;
        root.create_dir_all(oci::BIN_DIR, 0o755)?;
        root.create_dir_all(oci::PROC_DIR, 0o700)?;
        for (src, dst) in [
            (&self.config.tini, oci::INIT),
            (&self.config.shim_exe, oci::SHIM),
        ] {
            let bytes = tokio::fs::read(src)
                .await
                .with_context(|| format!("reading {}", src.display()))?;
            root.write(dst, &bytes, 0o755)?;
        }
        compat::install(&root, self.runc.runtime == Runtime::Runsc)?;
        for dir_in in [oci::WORKDIR, oci::STATE_DIR, oci::HOME] {
            root.create_dir_all(dir_in, 0o700)?;
        }

        Ok(root)
    }

    async fn build(&self, spec: &SandboxSpec, dir: &Path) -> anyhow::Result<Handle> {
        let name = spec.name.as_str();
        // A resume runs on the image its snapshot was made on, even after a
        // newer image took the name.
        let image_ref = spec
            .restore_from
            .as_ref()
            .and_then(|s| s.base_image.clone())
            .or_else(|| spec.image.clone())
            .unwrap_or_else(|| self.config.default_image.clone());
        let image = self
            .config
            .images
            .resolve(&image_ref)
            .with_context(|| format!("image {image_ref:?}"))?;
        // Refused before anything is built: a desktop needs the image's X
        // server, and silently running without one would hide the mistake.
        if self.config.desktop && image.xvfb_path.is_none() {
            return Err(fatal(anyhow!(
                "the desktop is on (SANDBOX_DESKTOP) but image {image_ref:?} has no X server \
                 (Xvfb); build it with the `desktop` recipe: \
                 garrison image build {image_ref} --recipe desktop"
            ))
            .into());
        }

        // Before anything is built: an unknown device fails the create.
        let mut devices = self.device_edits()?;

        std::fs::create_dir_all(dir.join("proc"))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        // runc only: gVisor's kernel keeps ids of its own, and its file
        // server would see the shifted ids of idmapped layers as the files'.
        let ids = match self.config.userns && self.runc.runtime == Runtime::Runc {
            true => Some(self.make_user_namespace(name, dir).await?),
            false => None,
        };
        let made_netns = ids.map(|_| dir.join(NETNS_FILE));
        // The root filesystem and the network namespace do not depend on each
        // other: building them together takes the longer of the two, not the
        // sum. A failure of either is cleaned up by `create`'s teardown.
        let (root, sandbox_net) =
            tokio::try_join!(self.prepare_root(spec, dir, &image.rootfs, ids), async {
                net::create_owned(
                    &self.net,
                    &spec.name,
                    spec.network.gateway_url.as_deref(),
                    &spec.network.policy,
                    made_netns.as_deref(),
                )
                .await
                .map_err(|e| anyhow!(e))
            })?;
        std::fs::write(
            dir.join(NET_FILE),
            format::LOCAL_NETWORK.to_vec(&sandbox_net)?,
        )?;
        if let Some(dns) = sandbox_net.dns {
            root.create_dir_all("/etc", 0o755)?;
            let conf = format!("nameserver {dns}\n");
            root.write("/etc/resolv.conf", conf.as_bytes(), 0o644)?;
        }

        let userns_pin = dir.join(USERNS_FILE);
        let user_ns = match ids {
            Some(ids) => Some((ids, self.expose_root(name, dir, ids)?)),
            None => None,
        };
        let cgroups_path = crate::runc::cgroups_path(name);
        let mut config = oci::config(&ContainerConfig {
            hostname: "sandbox",
            resources: &spec.resources,
            cgroups_path: &cgroups_path,
            netns: Some(&sandbox_net.netns_path),
            user_ns: user_ns.as_ref().map(|(ids, rootfs)| oci::UserNs {
                path: &userns_pin,
                host_base: ids.host_base,
                rootfs,
            }),
            limit_swap: oci::swap_limit_supported(),
        });
        if let Some(edits) = &mut devices {
            if let Some((ids, _)) = &user_ns {
                self.make_private_nodes(name, ids.host_base, edits)?;
            }
            crate::cdi::apply(&mut config, edits, user_ns.is_some());
            Self::keep_device_env(dir, edits)?;
        }
        std::fs::write(dir.join("config.json"), serde_json::to_vec_pretty(&config)?)?;
        // Recorded before the container exists, so a teardown after a crash
        // here still asks the right runtime.
        std::fs::write(dir.join(RUNTIME_FILE), self.runc.runtime.as_str())?;
        self.runc
            .run_detached(name, dir, &dir.join("init.pid"))
            .await?;

        let handle = Handle {
            backend: "local".to_owned(),
            id: name.to_owned(),
            name: name.to_owned(),
            labels: spec.labels.clone(),
            workdir: oci::WORKDIR.to_owned(),
            state_dir: oci::STATE_DIR.to_owned(),
            bin_dir: oci::BIN_DIR.to_owned(),
            home: oci::HOME.to_owned(),
            image: Some(image.id.clone()),
        };
        shim::write_atomically(
            &dir.join(HANDLE_FILE),
            &format::SANDBOX_HANDLE.to_vec_pretty(&handle)?,
        )?;
        Ok(handle)
    }
}
