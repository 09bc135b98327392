//! Writing CDI [`Edits`] into a container's OCI `config.json`. Pure, so
//! what a device grants is unit-tested as data.

use serde_json::{Value, json};

use super::Edits;

/// Applies `edits` to `config` (see `oci::config`). `user_ns`: the
/// container runs in a user namespace, where no device node can be made
/// inside: each is bind-mounted from its `host_path` (the backend makes
/// nodes of the sandbox's own there first).
pub fn apply(config: &mut Value, edits: &Edits, user_ns: bool) {
    let env = config["process"]["env"]
        .as_array_mut()
        .expect("config has process.env");
    for entry in &edits.env {
        let key = entry.split('=').next().unwrap_or_default();
        let prefix = format!("{key}=");
        env.retain(|e| !e.as_str().is_some_and(|e| e.starts_with(&prefix)));
        env.push(json!(entry));
    }

    let mut devices = Vec::new();
    let mut allowed = Vec::new();
    let mut mounts = Vec::new();
    for node in &edits.device_nodes {
        if user_ns {
            // A device must keep working through its mount: no `nodev`.
            // (`noexec` as on the backend's tmpfs of nodes: a bind mount
            // in a user namespace cannot drop a flag of its source.)
            mounts.push(json!({
                "destination": node.path,
                "type": "bind",
                "source": node.host_path,
                "options": ["bind", "nosuid", "noexec"]
            }));
        } else {
            let mut device = json!({
                "path": node.path,
                "type": node.kind,
                "major": node.major,
                "minor": node.minor,
            });
            for (key, value) in [
                ("fileMode", node.file_mode),
                ("uid", node.uid),
                ("gid", node.gid),
            ] {
                if let Some(value) = value {
                    device[key] = json!(value);
                }
            }
            devices.push(device);
        }
        // FIFOs are not devices to the cgroup; `u` is an unbuffered
        // character device there.
        if node.kind != "p" {
            let kind = if node.kind == "b" { "b" } else { "c" };
            allowed.push(json!({
                "allow": true,
                "type": kind,
                "major": node.major,
                "minor": node.minor,
                "access": node.permissions,
            }));
        }
    }
    for mount in &edits.mounts {
        mounts.push(mount_entry(mount));
    }
    extend(&mut config["linux"], "devices", devices);
    extend(&mut config["linux"]["resources"], "devices", allowed);
    extend(config, "mounts", mounts);

    for hook in &edits.hooks {
        let mut entry = json!({"path": hook.path});
        if !hook.args.is_empty() {
            entry["args"] = json!(hook.args);
        }
        if !hook.env.is_empty() {
            entry["env"] = json!(hook.env);
        }
        if let Some(timeout) = hook.timeout {
            entry["timeout"] = json!(timeout);
        }
        extend(&mut config["hooks"], &hook.hook_name, vec![entry]);
    }
}

/// A CDI mount as an OCI one: a bind mount unless the spec gives a type,
/// keeping the spec's options, with `nosuid` and `nodev` unless the spec
/// asks for `suid` or `dev`.
fn mount_entry(mount: &super::Mount) -> Value {
    let kind = mount.kind.clone().unwrap_or_else(|| "bind".to_owned());
    let mut options = mount.options.clone();
    let has = |options: &[String], o: &str| options.iter().any(|x| x == o);
    if kind == "bind" && !has(&options, "bind") && !has(&options, "rbind") {
        options.insert(0, "bind".to_owned());
    }
    for (on, off) in [("nosuid", "suid"), ("nodev", "dev")] {
        if !has(&options, on) && !has(&options, off) {
            options.push(on.to_owned());
        }
    }
    json!({
        "destination": mount.container_path,
        "type": kind,
        "source": mount.host_path,
        "options": options,
    })
}

/// Appends `items` to the array `parent[key]`, making it when absent (and
/// leaving `parent` alone when there is nothing to add).
fn extend(parent: &mut Value, key: &str, items: Vec<Value>) {
    if items.is_empty() {
        return;
    }
    let slot = &mut parent[key];
    if !slot.is_array() {
        *slot = json!([]);
    }
    slot.as_array_mut()
        .expect("made an array above")
        .extend(items);
}
