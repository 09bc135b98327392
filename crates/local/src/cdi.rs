//! Devices through the Container Device Interface (CDI): the spec files in
//! the spec directories name devices (`vendor.com/class=name`) with the
//! edits that hand them to a container (device nodes, mounts, environment,
//! hooks). [`Registry`] reads the directories; [`Registry::resolve`] turns
//! device names into the [`Edits`] to apply, which `oci_edits` writes into
//! a container's `config.json`.
//!
//! A later directory overrides an earlier one's device of the same name;
//! two files of one directory naming the same device make it unusable (as
//! in CDI's reference implementation), rather than one silently winning.

mod doctor;
mod oci_edits;
mod spec;

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::PathBuf;

use anyhow::{anyhow, bail};

pub use doctor::checks;
pub use oci_edits::apply;
pub use spec::{Hook, Mount};

/// Where specs are looked for when no directory is configured, in order
/// (the later overriding the earlier): static specs, then generated ones.
pub const DEFAULT_SPEC_DIRS: &[&str] = &["/etc/cdi", "/var/run/cdi"];
/// Most spec files read from one directory.
pub const MAX_SPEC_FILES: usize = 1024;

/// The devices of the spec directories.
#[derive(Debug, Default)]
pub struct Registry {
    specs: Vec<(PathBuf, spec::Spec)>,
    /// Qualified name: where it is defined.
    devices: BTreeMap<String, Defined>,
    /// Files that could not be read or parsed, with why.
    errors: Vec<(PathBuf, String)>,
}

#[derive(Debug)]
struct Defined {
    spec: usize,
    device: usize,
    dir: usize,
    /// Another file of the same directory that names it too.
    conflict: Option<PathBuf>,
}

/// A device found in a spec directory, for listings.
#[derive(Clone, Debug, PartialEq)]
pub struct Found {
    /// Its fully qualified name.
    pub name: String,
    /// The spec file defining it.
    pub spec_file: PathBuf,
}

/// The edits of a set of devices, with each device node's type and numbers
/// filled in from the host: everything [`apply`] needs, and no more host
/// access.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Edits {
    /// `KEY=VALUE`, later entries overriding earlier ones.
    pub env: Vec<String>,
    /// Device nodes.
    pub device_nodes: Vec<Node>,
    /// Host paths to mount.
    pub mounts: Vec<Mount>,
    /// OCI hooks.
    pub hooks: Vec<Hook>,
}

/// A device node, complete.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// In the container.
    pub path: String,
    /// On the host.
    pub host_path: String,
    /// `c`, `b`, `u` or `p`.
    pub kind: String,
    /// Device numbers.
    pub major: i64,
    /// Device numbers.
    pub minor: i64,
    /// Mode bits, if known.
    pub file_mode: Option<u32>,
    /// Cgroup access (`rwm` unless the spec said otherwise).
    pub permissions: String,
    /// Owner in the container, if given.
    pub uid: Option<u32>,
    /// Group in the container, if given.
    pub gid: Option<u32>,
}

/// The spec directories: `configured`, else [`DEFAULT_SPEC_DIRS`].
pub fn spec_dirs(configured: &[PathBuf]) -> Vec<PathBuf> {
    if configured.is_empty() {
        DEFAULT_SPEC_DIRS.iter().map(PathBuf::from).collect()
    } else {
        configured.to_vec()
    }
}

impl Registry {
    /// Reads every spec file of `dirs` (a missing directory has none).
    /// Files that cannot be read are kept as [`Registry::errors`], so one
    /// bad file does not hide the others' devices.
    pub fn load(dirs: &[PathBuf]) -> Self {
        let mut registry = Self::default();
        for (dir_index, dir) in dirs.iter().enumerate() {
            let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
                Ok(entries) => entries
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| spec::is_spec_file(p))
                    .take(MAX_SPEC_FILES + 1)
                    .collect(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    registry.errors.push((dir.clone(), e.to_string()));
                    continue;
                }
            };
            if files.len() > MAX_SPEC_FILES {
                registry.errors.push((
                    dir.clone(),
                    format!("more than {MAX_SPEC_FILES} spec files; none of them was read"),
                ));
                continue;
            }
            files.sort();
            for file in files {
                match spec::read(&file) {
                    Ok(spec) => registry.add(dir_index, file, spec),
                    Err(e) => registry.errors.push((file, format!("{e:#}"))),
                }
            }
        }
        registry
    }

    fn add(&mut self, dir: usize, file: PathBuf, spec: spec::Spec) {
        let index = self.specs.len();
        for (device, d) in spec.devices.iter().enumerate() {
            let name = format!("{}={}", spec.kind, d.name);
            let defined = Defined {
                spec: index,
                device,
                dir,
                conflict: None,
            };
            match self.devices.get_mut(&name) {
                Some(earlier) if earlier.dir == dir => {
                    earlier.conflict = Some(file.clone());
                }
                _ => {
                    self.devices.insert(name, defined);
                }
            }
        }
        self.specs.push((file, spec));
    }

    /// Every device found, by name, with its spec file.
    pub fn devices(&self) -> Vec<Found> {
        self.devices
            .iter()
            .map(|(name, d)| Found {
                name: name.clone(),
                spec_file: self.specs[d.spec].0.clone(),
            })
            .collect()
    }

    /// Spec files (or directories) that could not be read, with why.
    pub fn errors(&self) -> &[(PathBuf, String)] {
        &self.errors
    }

    /// The edits of `names` (fully qualified), each spec's own edits once
    /// before its devices'. An unknown name is an error listing the known
    /// ones and the files that could not be read.
    pub fn resolve(&self, names: &[String]) -> anyhow::Result<Edits> {
        let mut edits = Edits::default();
        let mut specs_done = BTreeSet::new();
        let mut devices_done = BTreeSet::new();
        for name in names {
            let defined = self.find(name)?;
            if !devices_done.insert(name) {
                continue;
            }
            let (file, spec) = &self.specs[defined.spec];
            let in_file =
                |e: anyhow::Error| anyhow!("CDI device {name} (spec {}): {e:#}", file.display());
            if specs_done.insert(defined.spec) {
                edits.add(&spec.container_edits).map_err(in_file)?;
            }
            edits
                .add(&spec.devices[defined.device].container_edits)
                .map_err(in_file)?;
        }
        Ok(edits)
    }

    fn find(&self, name: &str) -> anyhow::Result<&Defined> {
        let Some((kind, device)) = name.split_once('=') else {
            bail!("CDI device {name:?} is not a fully qualified name (vendor.com/class=name)");
        };
        spec::check_kind(kind).map_err(|e| anyhow!("CDI device {name:?}: {e}"))?;
        spec::check_device_name(device).map_err(|e| anyhow!("CDI device {name:?}: {e}"))?;
        match self.devices.get(name) {
            Some(Defined {
                conflict: Some(other),
                spec,
                ..
            }) => bail!(
                "CDI device {name} is defined by both {} and {}; remove one",
                self.specs[*spec].0.display(),
                other.display()
            ),
            Some(defined) => Ok(defined),
            None => Err(anyhow!("unknown CDI device {name}; {}", self.known())),
        }
    }

    /// "known devices: …" and the files that could not be read.
    fn known(&self) -> String {
        let names: Vec<&str> = self.devices.keys().map(String::as_str).collect();
        let mut text = if names.is_empty() {
            "no devices are defined".to_owned()
        } else {
            format!("known devices: {}", names.join(", "))
        };
        for (file, error) in &self.errors {
            text.push_str(&format!(
                "; the spec {} could not be read: {error}",
                file.display()
            ));
        }
        text
    }
}

impl Edits {
    fn add(&mut self, edits: &spec::ContainerEdits) -> anyhow::Result<()> {
        self.env.extend(edits.env.iter().cloned());
        for node in &edits.device_nodes {
            self.device_nodes.push(complete(node)?);
        }
        self.mounts.extend(edits.mounts.iter().cloned());
        self.hooks.extend(edits.hooks.iter().cloned());
        Ok(())
    }
}

/// A device node with what the spec left out read from the host's node.
fn complete(node: &spec::DeviceNode) -> anyhow::Result<Node> {
    let host_path = node.host_path.clone().unwrap_or_else(|| node.path.clone());
    // Only what the spec left out needs the host's node, so a spec that
    // gives everything works where the node does not exist (yet).
    let needs_host = node.kind.is_none()
        || (node.kind.as_deref() != Some("p") && (node.major.is_none() || node.minor.is_none()));
    let host = match needs_host {
        true => Some(
            std::fs::metadata(&host_path).map_err(|e| anyhow!("device node {host_path}: {e}"))?,
        ),
        false => None,
    };
    let host_kind = host.as_ref().map(|meta| {
        let t = meta.file_type();
        if t.is_char_device() {
            Ok("c")
        } else if t.is_block_device() {
            Ok("b")
        } else if t.is_fifo() {
            Ok("p")
        } else {
            Err(anyhow!("{host_path} is not a device node"))
        }
    });
    let kind = match (&node.kind, host_kind) {
        (Some(kind), _) => kind.clone(),
        (None, Some(kind)) => kind?.to_owned(),
        (None, None) => unreachable!("a node without a type is read from the host"),
    };
    let rdev = host.as_ref().map_or(0, MetadataExt::rdev);
    Ok(Node {
        path: node.path.clone(),
        host_path,
        major: node
            .major
            .unwrap_or(nix::sys::stat::major(rdev as libc::dev_t) as i64),
        minor: node
            .minor
            .unwrap_or(nix::sys::stat::minor(rdev as libc::dev_t) as i64),
        kind,
        file_mode: node
            .file_mode
            .or_else(|| host.as_ref().map(|m| m.mode() & 0o7777)),
        permissions: node.permissions.clone().unwrap_or_else(|| "rwm".to_owned()),
        uid: node.uid,
        gid: node.gid,
    })
}

#[cfg(test)]
mod tests;
