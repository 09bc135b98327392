//! The CDI spec file format (Container Device Interface, `SPEC.md` of
//! cncf-tags/container-device-interface): what one `*.json` / `*.yaml` file
//! in a spec directory says. Unknown fields are ignored, so specs written
//! for newer versions of the format still parse; only what Garrison applies
//! is read.

use std::path::Path;

use anyhow::{Context, anyhow, bail};
use serde::Deserialize;

/// Largest spec file read: NVIDIA's specs for an eight-GPU host are tens
/// of KiB; this leaves room and bounds what a stray file costs.
pub(crate) const MAX_SPEC_BYTES: u64 = 4 << 20;
/// Most devices one spec may name.
pub(crate) const MAX_DEVICES_PER_SPEC: usize = 4096;
/// Most entries one list of edits (env, device nodes, mounts, hooks, a
/// hook's args) may have.
pub(crate) const MAX_EDITS: usize = 4096;

/// One spec file.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Spec {
    /// The format's version, e.g. `0.5.0`.
    pub cdi_version: String,
    /// `vendor.com/class`: the first half of its devices' names.
    pub kind: String,
    /// Its devices.
    pub devices: Vec<Device>,
    /// Applied whenever any of its devices is used.
    #[serde(default)]
    pub container_edits: ContainerEdits,
}

/// A device of a spec; its full name is `<kind>=<name>`.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Device {
    /// The name within its kind.
    pub name: String,
    /// Applied when this device is used.
    #[serde(default)]
    pub container_edits: ContainerEdits,
}

/// What using a device changes in the container.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct ContainerEdits {
    /// `KEY=VALUE` entries.
    pub env: Vec<String>,
    /// Device nodes to create in the container.
    pub device_nodes: Vec<DeviceNode>,
    /// OCI hooks.
    pub hooks: Vec<Hook>,
    /// Host paths to mount.
    pub mounts: Vec<Mount>,
}

/// A device node: `path` in the container, `host_path` on the host.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct DeviceNode {
    /// Where it appears in the container.
    pub path: String,
    /// The host's node, when not at `path`.
    pub host_path: Option<String>,
    /// `c`, `b`, `u` or `p`; read from the host's node when absent.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// Read from the host's node when absent.
    pub major: Option<i64>,
    /// Read from the host's node when absent.
    pub minor: Option<i64>,
    /// The node's mode bits.
    pub file_mode: Option<u32>,
    /// Cgroup access: a combination of `r`, `w` and `m` (all when absent).
    pub permissions: Option<String>,
    /// Owner in the container.
    pub uid: Option<u32>,
    /// Group in the container.
    pub gid: Option<u32>,
}

/// A mount of a host path.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct Mount {
    /// The host path (the mount's source).
    pub host_path: String,
    /// Where it appears in the container.
    pub container_path: String,
    /// The file system type; a bind mount when absent.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// Mount options, e.g. `ro`, `nosuid`, `nodev`, `bind`.
    pub options: Vec<String>,
}

/// An OCI hook run at `hook_name`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct Hook {
    /// The OCI hook point, e.g. `createContainer`.
    pub hook_name: String,
    /// The program (a host path).
    pub path: String,
    /// Its argv, program name first.
    pub args: Vec<String>,
    /// `KEY=VALUE` entries.
    pub env: Vec<String>,
    /// Seconds before the runtime gives up on it.
    pub timeout: Option<i64>,
}

/// The OCI hook points a CDI hook may name.
pub(crate) const HOOK_NAMES: &[&str] = &[
    "prestart",
    "createRuntime",
    "createContainer",
    "startContainer",
    "poststart",
    "poststop",
];

/// Whether `path` is a spec file by its name.
pub(crate) fn is_spec_file(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("json" | "yaml" | "yml")
    )
}

/// Parses and checks one spec file's text; `path` decides the format (JSON
/// is YAML too, but its own parser gives the clearer errors).
pub(crate) fn parse(path: &Path, text: &str) -> anyhow::Result<Spec> {
    let spec: Spec = if path.extension().is_some_and(|e| e == "json") {
        serde_json::from_str(text)?
    } else {
        serde_yaml_ng::from_str(text)?
    };
    spec.check()?;
    Ok(spec)
}

/// Reads and parses the spec at `path`, no more than [`MAX_SPEC_BYTES`].
pub(crate) fn read(path: &Path) -> anyhow::Result<Spec> {
    use std::io::Read;
    let file = std::fs::File::open(path)?;
    let mut text = String::new();
    file.take(MAX_SPEC_BYTES + 1)
        .read_to_string(&mut text)
        .context("reading it")?;
    if text.len() as u64 > MAX_SPEC_BYTES {
        bail!("larger than {MAX_SPEC_BYTES} bytes");
    }
    parse(path, &text)
}

impl Spec {
    fn check(&self) -> anyhow::Result<()> {
        if self.cdi_version.trim().is_empty() {
            bail!("cdiVersion is empty");
        }
        check_kind(&self.kind)?;
        if self.devices.is_empty() {
            bail!("it names no devices");
        }
        if self.devices.len() > MAX_DEVICES_PER_SPEC {
            bail!("more than {MAX_DEVICES_PER_SPEC} devices");
        }
        self.container_edits.check().context("its containerEdits")?;
        let mut seen = std::collections::BTreeSet::new();
        for device in &self.devices {
            check_device_name(&device.name)?;
            if !seen.insert(&device.name) {
                bail!("device {:?} is named twice", device.name);
            }
            device
                .container_edits
                .check()
                .with_context(|| format!("device {:?}", device.name))?;
        }
        Ok(())
    }
}

impl ContainerEdits {
    fn check(&self) -> anyhow::Result<()> {
        for (what, len) in [
            ("env", self.env.len()),
            ("deviceNodes", self.device_nodes.len()),
            ("hooks", self.hooks.len()),
            ("mounts", self.mounts.len()),
        ] {
            if len > MAX_EDITS {
                bail!("more than {MAX_EDITS} {what}");
            }
        }
        for env in self
            .env
            .iter()
            .chain(self.hooks.iter().flat_map(|h| &h.env))
        {
            check_env(env)?;
        }
        for node in &self.device_nodes {
            check_absolute("deviceNodes path", &node.path)?;
            if let Some(host) = &node.host_path {
                check_absolute("deviceNodes hostPath", host)?;
            }
            if let Some(kind) = &node.kind
                && !matches!(kind.as_str(), "c" | "b" | "u" | "p")
            {
                bail!(
                    "device node {}: type {kind:?} is not c, b, u or p",
                    node.path
                );
            }
            if let Some(permissions) = &node.permissions
                && (permissions.is_empty() || !permissions.chars().all(|c| "rwm".contains(c)))
            {
                bail!(
                    "device node {}: permissions {permissions:?} are not made of r, w and m",
                    node.path
                );
            }
        }
        for mount in &self.mounts {
            check_absolute("mounts hostPath", &mount.host_path)?;
            check_absolute("mounts containerPath", &mount.container_path)?;
            if mount.options.len() > MAX_EDITS {
                bail!("mount {}: too many options", mount.container_path);
            }
        }
        for hook in &self.hooks {
            if !HOOK_NAMES.contains(&hook.hook_name.as_str()) {
                bail!(
                    "hook {}: hookName {:?} is not one of {}",
                    hook.path,
                    hook.hook_name,
                    HOOK_NAMES.join(", ")
                );
            }
            check_absolute("hooks path", &hook.path)?;
            if hook.args.len() > MAX_EDITS {
                bail!("hook {}: too many args", hook.path);
            }
        }
        Ok(())
    }
}

fn check_absolute(what: &str, path: &str) -> anyhow::Result<()> {
    if !path.starts_with('/') {
        bail!("{what} {path:?} is not an absolute path");
    }
    if path.split('/').any(|part| part == "..") {
        bail!("{what} {path:?} has a \"..\" in it");
    }
    Ok(())
}

fn check_env(entry: &str) -> anyhow::Result<()> {
    match entry.split_once('=') {
        Some((key, _)) if !key.is_empty() && !key.contains('\0') => Ok(()),
        _ => Err(anyhow!("env entry {entry:?} is not KEY=VALUE")),
    }
}

/// `vendor.com/class`: the vendor a domain-like name, the class letters,
/// digits, `-` and `_`.
pub(crate) fn check_kind(kind: &str) -> anyhow::Result<()> {
    let bad = || anyhow!("kind {kind:?} is not vendor.com/class");
    let (vendor, class) = kind.split_once('/').ok_or_else(bad)?;
    let edge_ok = |s: &str| {
        s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
            && s.chars().last().is_some_and(|c| c.is_ascii_alphanumeric())
    };
    let vendor_ok = edge_ok(vendor)
        && vendor
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    let class_ok = edge_ok(class)
        && class
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_".contains(c));
    if vendor_ok && class_ok {
        Ok(())
    } else {
        Err(bad())
    }
}

/// A device's name within its kind: letters, digits, `-`, `_`, `.` and `:`,
/// starting and ending with a letter or digit.
pub(crate) fn check_device_name(name: &str) -> anyhow::Result<()> {
    let ok = name.len() <= 256
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .last()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c));
    if ok {
        Ok(())
    } else {
        Err(anyhow!(
            "device name {name:?} is not made of letters, digits, -, _, . and :"
        ))
    }
}
