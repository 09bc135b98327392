//! The local backend as the registry lists it: its settings (the static
//! shim, the desktop, the OCI runtime, CDI devices), and the check at start that there is an image to run
//! sessions on.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::settings::{Kind, Setting, SettingsError, SettingsSource};

use sandbox::Sandbox;
use sandbox::plugin::doctor::Check;
use sandbox::plugin::{BackendPlugin, ConfiguredBackend, Placement};

use crate::backend::{LocalBackend, LocalConfig};
use crate::runc::Runtime;
use crate::userns::USERNS_ENV;

/// Where the statically linked `garrison-shim` is, if not next to the
/// running binary (tests and development builds).
pub const STATIC_SHIM_ENV: &str = "GARRISON_STATIC_SHIM";

/// Turns on a desktop (Xvfb) in every sandbox; see [`LocalConfig::desktop`].
pub(crate) const DESKTOP_ENV: &str = "SANDBOX_DESKTOP";
/// The `garrison.toml` key of [`DESKTOP_ENV`].
pub(crate) const DESKTOP_KEY: &str = "desktop";

/// CDI devices handed to every sandbox; see [`LocalConfig::devices`].
pub const DEVICES_ENV: &str = "SANDBOX_DEVICES";
/// The `garrison.toml` key of [`DEVICES_ENV`].
pub const DEVICES_KEY: &str = "devices";
/// The directories CDI specs are read from; see [`LocalConfig::cdi_spec_dirs`].
pub const CDI_SPEC_DIRS_ENV: &str = "CDI_SPEC_DIRS";
/// The `garrison.toml` key of [`CDI_SPEC_DIRS_ENV`].
pub const CDI_SPEC_DIRS_KEY: &str = "cdi_spec_dirs";

/// The `garrison.toml` key of [`USERNS_ENV`].
pub(crate) const USERNS_KEY: &str = "userns";
/// The OCI runtime new sandboxes run on: `runc` or `runsc` (gVisor); see
/// [`Runtime`].
pub const RUNTIME_ENV: &str = "SANDBOX_RUNTIME";
/// The `garrison.toml` key of [`RUNTIME_ENV`].
pub const RUNTIME_KEY: &str = "runtime";

/// The local backend's settings.
pub(crate) const SETTINGS: &[Setting] = &[
    Setting::new(
        RUNTIME_KEY,
        "--runtime",
        RUNTIME_ENV,
        Kind::Choice(&["runc", "runsc"]),
        "The OCI runtime of new sandboxes: runc (namespaces and seccomp on the host's kernel) \
         or runsc (gVisor: a kernel in user space, ptrace platform; slower system calls)",
    )
    .default("\"runc\""),
    Setting::new(
        DESKTOP_KEY,
        "--desktop",
        DESKTOP_ENV,
        Kind::Bool,
        "Run Xvfb (kept alive) in each sandbox and give the remote DISPLAY and \
         DEVIN_OUTPOST_DESKTOP=true; build the image with `--recipe desktop`",
    )
    .default("false"),
    Setting::new(
        USERNS_KEY,
        "--userns",
        USERNS_ENV,
        Kind::Bool,
        "Run each container in a user namespace of its own, so its root is an unprivileged \
         host uid; needs a file system with idmapped mounts under the state directory (ext4, \
         xfs, btrfs, tmpfs). runc only: under runsc, gVisor's kernel keeps its own ids",
    )
    .default("true"),
    Setting::new(
        DEVICES_KEY,
        "--device",
        DEVICES_ENV,
        Kind::List,
        "CDI devices (vendor.com/class=name) handed to every sandbox: their device nodes, \
         mounts, environment and hooks from the CDI specs; repeat or separate with commas. \
         runc only",
    )
    .example("[\"nvidia.com/gpu=all\"]")
    .backend_only(),
    Setting::new(
        CDI_SPEC_DIRS_KEY,
        "--cdi-spec-dir",
        CDI_SPEC_DIRS_ENV,
        Kind::List,
        "Directories of CDI specs, a later one overriding an earlier one's device of the \
         same name; repeat the flag, or separate with colons",
    )
    .default("[\"/etc/cdi\", \"/var/run/cdi\"]"),
];

/// Containers on this machine: the embedded default.
pub struct LocalPlugin;

/// The one [`LocalPlugin`].
pub static PLUGIN: LocalPlugin = LocalPlugin;

impl BackendPlugin for LocalPlugin {
    fn name(&self) -> &'static str {
        "local"
    }

    fn summary(&self) -> &'static str {
        "a container per session on this machine"
    }

    fn settings_help(&self) -> &'static str {
        "  SANDBOX_DESKTOP (or desktop = true in the file): run Xvfb (restarted if
  it dies) in each sandbox and give the remote DISPLAY and
  DEVIN_OUTPOST_DESKTOP=true; build the image with `garrison image build
  NAME --recipe desktop` [default: false].
  SANDBOX_USERNS (or userns = false in the file): run each container in a
  user namespace of its own, so its root is an unprivileged host uid (from
  1073741824, 65536 ids per sandbox); needs a file system with idmapped
  mounts under the state directory (ext4, xfs, btrfs, tmpfs). runc only:
  under runsc, gVisor's kernel keeps its own ids [default: true].
  SANDBOX_RUNTIME (or runtime = \"runsc\" in the file): the OCI runtime of new
  sandboxes: runc (namespaces and seccomp on the host's kernel) or runsc
  (gVisor: a kernel in user space, ptrace platform; slower system calls)
  [default: runc].
  SANDBOX_DEVICES (or devices = [...] in the file, --device): CDI devices
  (vendor.com/class=name) handed to every sandbox, from the CDI specs; runc
  only. CDI_SPEC_DIRS (or cdi_spec_dirs, --cdi-spec-dir): where the specs
  are, colon-separated [default: /etc/cdi:/var/run/cdi]."
    }

    fn file_keys(&self) -> &'static [&'static str] {
        &[
            RUNTIME_KEY,
            DESKTOP_KEY,
            USERNS_KEY,
            DEVICES_KEY,
            CDI_SPEC_DIRS_KEY,
        ]
    }

    fn settings(&self) -> &'static [Setting] {
        SETTINGS
    }

    fn setup_hint(&self) -> &'static str {
        "run scripts/setup as root, or `garrison doctor --backend local` to see what is missing"
    }

    fn prerequisites(
        &self,
        configured: Option<&dyn ConfiguredBackend>,
        state_dir: &Path,
    ) -> Option<Vec<Check>> {
        // The runtime the settings chose decides what is checked.
        let runtime = configured.and_then(configured_runtime).unwrap_or_default();
        let mut checks = crate::prerequisites::prerequisites(state_dir, runtime);
        let local = configured.and_then(|c| c.downcast_ref::<Local>());
        checks.extend(crate::cdi::checks(
            local.map_or(&[][..], |l| &l.cdi_spec_dirs),
            local.map_or(&[][..], |l| &l.devices),
        ));
        Some(checks)
    }

    fn configure(
        &self,
        settings: &dyn SettingsSource,
    ) -> Result<Arc<dyn ConfiguredBackend>, SettingsError> {
        let runtime = match settings.get(RUNTIME_ENV, RUNTIME_KEY) {
            None => Runtime::default(),
            Some(value) => value
                .value
                .parse::<Runtime>()
                .map_err(|e| value.invalid(e))?,
        };
        let devices = list(settings, DEVICES_ENV, DEVICES_KEY, &[',']);
        if runtime == Runtime::Runsc
            && let Some(value) = settings.get(DEVICES_ENV, DEVICES_KEY)
            && !devices.is_empty()
        {
            return Err(value.invalid(RUNSC_DEVICES));
        }
        Ok(Arc::new(Local {
            devices,
            cdi_spec_dirs: list(settings, CDI_SPEC_DIRS_ENV, CDI_SPEC_DIRS_KEY, &[':', ','])
                .into_iter()
                .map(PathBuf::from)
                .collect(),
            static_shim: settings
                .var(STATIC_SHIM_ENV)
                .map(|v| PathBuf::from(v.value)),
            desktop: flag(settings, DESKTOP_ENV, DESKTOP_KEY, false)?,
            userns: flag(settings, USERNS_ENV, USERNS_KEY, true)?,
            runtime,
        }))
    }
}

/// Why devices are refused under runsc.
pub(crate) const RUNSC_DEVICES: &str = "devices need runtime runc: gVisor (runsc) passes \
     through only a few devices of its own (NVIDIA GPUs with --nvproxy), not CDI's edits";

/// A list setting: its entries split at `separators`, blanks dropped.
fn list(
    settings: &dyn SettingsSource,
    env: &'static str,
    key: &'static str,
    separators: &[char],
) -> Vec<String> {
    settings
        .get(env, key)
        .map(|value| {
            value
                .value
                .split(separators)
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// A true/false setting.
fn flag(
    settings: &dyn SettingsSource,
    env: &'static str,
    key: &'static str,
    default: bool,
) -> Result<bool, SettingsError> {
    match settings.get(env, key) {
        None => Ok(default),
        Some(value) => match value.value.trim() {
            "true" | "1" => Ok(true),
            "false" | "0" => Ok(false),
            other => Err(value.invalid(format!("{other:?} is not true or false"))),
        },
    }
}

/// The runtime a configured local backend runs new sandboxes on (`None`
/// for another backend), for `garrison doctor`.
pub fn configured_runtime(backend: &dyn ConfiguredBackend) -> Option<Runtime> {
    backend.downcast_ref::<Local>().map(|local| local.runtime)
}

#[derive(Debug)]
struct Local {
    /// `None`: `garrison-shim` next to the running binary.
    static_shim: Option<PathBuf>,
    desktop: bool,
    userns: bool,
    runtime: Runtime,
    devices: Vec<String>,
    cdi_spec_dirs: Vec<PathBuf>,
}

impl ConfiguredBackend for Local {
    fn build(&self, placement: &Placement) -> anyhow::Result<Arc<dyn Sandbox>> {
        let static_shim = self
            .static_shim
            .clone()
            .unwrap_or_else(|| placement.exe.with_file_name("garrison-shim"));
        let mut config =
            LocalConfig::for_state_dir(&placement.state_dir, &placement.snapshot_dir, static_shim)?;
        config.desktop = self.desktop;
        config.userns = self.userns;
        config.runtime = self.runtime;
        config.devices = self.devices.clone();
        config.cdi_spec_dirs = self.cdi_spec_dirs.clone();
        config.snapshot_store = placement.snapshot_store.clone();
        // Fail at start, not on the first session, when there is nothing
        // to run sessions on.
        config.images.resolve(&config.default_image).map_err(|e| {
            let name = &config.default_image;
            let fix = format!(
                "build it with `garrison image build {name} --state-dir {}` (as root), \
                 or serve with --backend host",
                placement.state_dir.display()
            );
            // The store's own error repeats the advice, without --state-dir:
            // only a name that is there but broken needs it.
            if config.images.root().join("names").join(name).exists() {
                anyhow::anyhow!("the local backend's image {name:?} is unusable: {e:#}; {fix}")
            } else {
                anyhow::anyhow!(
                    "the local backend has no image {name:?} in {}; {fix}",
                    config.images.root().display()
                )
            }
        })?;
        Ok(Arc::new(LocalBackend::new(config)?))
    }
}

#[cfg(test)]
mod tests {
    use common::settings::MapSource;

    use super::*;

    fn local(pairs: &[(&str, &str)]) -> Result<(bool, bool), SettingsError> {
        let configured = PLUGIN.configure(&MapSource::vars(pairs))?;
        let local = configured
            .downcast_ref::<Local>()
            .expect("the local backend");
        Ok((local.desktop, local.userns))
    }

    fn desktop(pairs: &[(&str, &str)]) -> Result<bool, SettingsError> {
        local(pairs).map(|(desktop, _)| desktop)
    }

    #[test]
    fn user_namespaces_are_on_unless_turned_off() {
        let userns = |pairs: &[(&str, &str)]| local(pairs).map(|(_, userns)| userns);
        assert!(userns(&[]).unwrap());
        assert!(!userns(&[(USERNS_ENV, "false")]).unwrap());
        let err = userns(&[(USERNS_ENV, "maybe")]).unwrap_err();
        assert!(err.to_string().contains(USERNS_ENV), "{err}");
        assert!(PLUGIN.file_keys().contains(&USERNS_KEY));
    }

    #[test]
    fn the_desktop_is_off_unless_turned_on() {
        assert!(!desktop(&[]).unwrap());
        assert!(desktop(&[(DESKTOP_ENV, "true")]).unwrap());
        assert!(!desktop(&[(DESKTOP_ENV, "0")]).unwrap());
        let err = desktop(&[(DESKTOP_ENV, "yes please")]).unwrap_err();
        assert!(err.to_string().contains(DESKTOP_ENV), "{err}");
        assert!(PLUGIN.file_keys().contains(&DESKTOP_KEY));
    }

    #[test]
    fn devices_and_spec_directories_are_lists() {
        let configured = PLUGIN
            .configure(&MapSource::vars(&[
                (DEVICES_ENV, "nvidia.com/gpu=0, example.com/x=y,"),
                (CDI_SPEC_DIRS_ENV, "/etc/cdi:/srv/cdi"),
            ]))
            .unwrap();
        let local = configured.downcast_ref::<Local>().unwrap();
        assert_eq!(local.devices, ["nvidia.com/gpu=0", "example.com/x=y"]);
        assert_eq!(
            local.cdi_spec_dirs,
            [PathBuf::from("/etc/cdi"), PathBuf::from("/srv/cdi")]
        );
        for key in [DEVICES_KEY, CDI_SPEC_DIRS_KEY] {
            assert!(PLUGIN.file_keys().contains(&key));
        }
        let none = PLUGIN.configure(&MapSource::vars(&[])).unwrap();
        let none = none.downcast_ref::<Local>().unwrap();
        assert!(none.devices.is_empty() && none.cdi_spec_dirs.is_empty());
    }

    #[test]
    fn devices_are_refused_under_runsc() {
        let err = PLUGIN
            .configure(&MapSource::vars(&[
                (RUNTIME_ENV, "runsc"),
                (DEVICES_ENV, "nvidia.com/gpu=0"),
            ]))
            .unwrap_err()
            .to_string();
        assert!(err.contains(DEVICES_ENV), "{err}");
        assert!(err.contains("runc") && err.contains("nvproxy"), "{err}");
    }

    fn runtime(pairs: &[(&str, &str)]) -> Result<Runtime, SettingsError> {
        let configured = PLUGIN.configure(&MapSource::vars(pairs))?;
        Ok(configured
            .downcast_ref::<Local>()
            .expect("the local backend")
            .runtime)
    }

    #[test]
    fn the_runtime_is_runc_unless_runsc_is_chosen() {
        assert_eq!(runtime(&[]).unwrap(), Runtime::Runc);
        assert_eq!(runtime(&[(RUNTIME_ENV, "runsc")]).unwrap(), Runtime::Runsc);
        assert_eq!(runtime(&[(RUNTIME_ENV, " runc ")]).unwrap(), Runtime::Runc);
        let err = runtime(&[(RUNTIME_ENV, "kata")]).unwrap_err();
        assert!(err.to_string().contains(RUNTIME_ENV), "{err}");
        assert!(err.to_string().contains("kata"), "{err}");
        assert!(PLUGIN.file_keys().contains(&RUNTIME_KEY));
        assert!(PLUGIN.settings_help().contains(RUNTIME_ENV));
    }
}
