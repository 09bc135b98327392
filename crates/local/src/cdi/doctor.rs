//! What `garrison doctor --backend local` says about CDI: every device the
//! spec directories define (name and spec file), the spec files that could
//! not be read, and whether the configured devices resolve.

use std::path::PathBuf;

use sandbox::plugin::doctor::Check;

use super::{Registry, spec_dirs};

/// The checks for spec directories `dirs` (empty: the defaults) and the
/// configured `devices`.
pub fn checks(dirs: &[PathBuf], devices: &[String]) -> Vec<Check> {
    let dirs = spec_dirs(dirs);
    let registry = Registry::load(&dirs);
    let mut checks: Vec<Check> = registry
        .devices()
        .into_iter()
        .map(|found| {
            Check::info(
                format!("CDI device {}", found.name),
                format!("spec {}", found.spec_file.display()),
            )
        })
        .collect();
    if checks.is_empty() {
        let dirs: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        checks.push(Check::info(
            "CDI devices",
            format!("none defined in {}", dirs.join(", ")),
        ));
    }
    for (file, error) in registry.errors() {
        checks.push(Check::warn(
            format!("CDI spec {}", file.display()),
            error.clone(),
            "fix or remove it: its devices cannot be used",
        ));
    }
    if !devices.is_empty() {
        checks.push(match registry.resolve(devices) {
            Ok(_) => Check::pass("devices", devices.join(", ")),
            Err(e) => Check::fail(
                "devices",
                format!("{e:#}"),
                "name devices the CDI specs define (SANDBOX_DEVICES, --device)",
            ),
        });
    }
    checks
}
