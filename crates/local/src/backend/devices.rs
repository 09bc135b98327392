//! CDI devices in a sandbox: resolved from the spec directories when it is
//! created (so an unknown device fails the create before anything is
//! built), their edits applied to its `config.json`, and their environment
//! kept beside it for every process started in it later: the shim gives
//! each process an explicit environment, so the container's own would
//! reach only its init.
//!
//! In a user namespace runc cannot make device nodes, and bind-mounts the
//! host's instead; but a host node owned by host root (often mode 0600)
//! is closed to the container's root, whose ids are not host root's. So
//! each node is made anew, owned by the container's ids, on a small tmpfs
//! of the sandbox's own (mounted by host root, so its nodes open: not on
//! `/run`, which is usually `nodev`), and bind-mounted from there.

use std::collections::BTreeMap;
use std::path::Path;

use std::os::unix::fs::PermissionsExt;

use anyhow::{Context, anyhow};

use super::{LocalBackend, fatal};
use crate::cdi::{self, Edits};
use crate::runc::Runtime;

/// The devices' `KEY=VALUE` entries, a JSON array, in the sandbox's
/// directory.
const DEVICE_ENV_FILE: &str = "devices-env.json";
/// Most bytes of [`DEVICE_ENV_FILE`] read back.
const MAX_DEVICE_ENV_BYTES: u64 = 1 << 20;
/// The tmpfs of a user-namespaced sandbox's device nodes, in the directory
/// its container's root can reach (`ids::reachable_dir`).
pub(super) const NODES_DIR: &str = "devices";

impl LocalBackend {
    /// The edits of the configured devices; `None` when there are none.
    pub(super) fn device_edits(&self) -> anyhow::Result<Option<Edits>> {
        if self.config.devices.is_empty() {
            return Ok(None);
        }
        if self.runc.runtime == Runtime::Runsc {
            return Err(fatal(anyhow!("{}", crate::plugin::RUNSC_DEVICES)).into());
        }
        let dirs = cdi::spec_dirs(&self.config.cdi_spec_dirs);
        match cdi::Registry::load(&dirs).resolve(&self.config.devices) {
            Ok(edits) => Ok(Some(edits)),
            Err(e) => Err(fatal(e).into()),
        }
    }

    /// Makes the device nodes of `edits` for sandbox `name`, whose
    /// container maps its id 0 to host id `host_base`, and points the edits
    /// at them (see the module's documentation).
    pub(super) fn make_private_nodes(
        &self,
        name: &str,
        host_base: u32,
        edits: &mut Edits,
    ) -> anyhow::Result<()> {
        use nix::sys::stat::{Mode, SFlag, makedev, mknod};
        if edits.device_nodes.is_empty() {
            return Ok(());
        }
        let dir = self.reachable_dir(name).join(NODES_DIR);
        std::fs::create_dir_all(&dir)?;
        nix::mount::mount(
            Some("tmpfs"),
            &dir,
            Some("tmpfs"),
            nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NOEXEC,
            Some(format!("size=64k,mode=0710,uid=0,gid={host_base}").as_str()),
        )
        .with_context(|| format!("mounting a tmpfs for device nodes at {}", dir.display()))?;
        for (i, node) in edits.device_nodes.iter_mut().enumerate() {
            let kind = match node.kind.as_str() {
                "b" => SFlag::S_IFBLK,
                "p" => SFlag::S_IFIFO,
                _ => SFlag::S_IFCHR,
            };
            let mode = node.file_mode.unwrap_or(0o666) & 0o777;
            let path = dir.join(i.to_string());
            let dev = makedev(node.major as u64, node.minor as u64);
            mknod(&path, kind, Mode::from_bits_truncate(mode), dev)
                .with_context(|| format!("making the device node for {}", node.path))?;
            let id = |id: Option<u32>| -> anyhow::Result<u32> {
                match id.unwrap_or(0) {
                    id if id < crate::userns::IDS => Ok(host_base + id),
                    id => Err(anyhow!(
                        "device node {}: id {id} is outside the sandbox's user namespace",
                        node.path
                    )),
                }
            };
            std::os::unix::fs::chown(&path, Some(id(node.uid)?), Some(id(node.gid)?))?;
            // mknod's mode went through the umask.
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
            node.host_path = path.to_string_lossy().into_owned();
        }
        Ok(())
    }

    /// Records `edits`' environment in the sandbox's directory `dir`.
    pub(super) fn keep_device_env(dir: &Path, edits: &Edits) -> anyhow::Result<()> {
        shim::write_atomically(&dir.join(DEVICE_ENV_FILE), &serde_json::to_vec(&edits.env)?)?;
        Ok(())
    }

    /// The environment of a process: the devices' (none when the sandbox
    /// has none), under the process's own.
    pub(super) fn process_env(
        dir: &Path,
        own: &BTreeMap<String, String>,
    ) -> anyhow::Result<Vec<(String, String)>> {
        let mut env = BTreeMap::new();
        match std::fs::File::open(dir.join(DEVICE_ENV_FILE)) {
            Ok(file) => {
                use std::io::Read;
                let mut bytes = Vec::new();
                file.take(MAX_DEVICE_ENV_BYTES).read_to_end(&mut bytes)?;
                let entries: Vec<String> = serde_json::from_slice(&bytes)?;
                for entry in entries {
                    if let Some((key, value)) = entry.split_once('=') {
                        env.insert(key.to_owned(), value.to_owned());
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
        env.extend(own.iter().map(|(k, v)| (k.clone(), v.clone())));
        Ok(env.into_iter().collect())
    }
}
