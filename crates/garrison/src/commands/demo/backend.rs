//! Which backend the demo runs its sessions on, and why.
//!
//! `local` (containers) when this machine has everything it needs, as
//! `garrison doctor` checks it; else `host`, saying what is missing. When
//! the only thing missing is the `default` image and this process could
//! build it (root, mmdebstrap), it is built once into the demo's state
//! directory: a new user running `scripts/demo` as root gets containers
//! without a further step.

use std::path::Path;

use sandbox::local::images::{DEFAULT_IMAGE, ImageStore, NoProgress, Recipe};
use sandbox::plugin::BackendPlugin;

use crate::commands::doctor::check::Check;
use crate::commands::doctor::host;

/// The backend to use and the sentence that says so.
pub struct Choice {
    pub backend: &'static dyn BackendPlugin,
    pub message: String,
}

/// Picks the backend: `requested` if given, else as described above.
pub async fn choose(requested: Option<&'static dyn BackendPlugin>, state_dir: &Path) -> Choice {
    if let Some(backend) = requested {
        return Choice {
            backend,
            message: format!("using the {} backend (--backend)", backend.name()),
        };
    }
    let checks = host::local_prerequisites(state_dir, Default::default());
    let failing: Vec<&Check> = checks.iter().filter(|c| !c.passed()).collect();
    let image_only = failing.len() == 1 && failing[0].name.starts_with("image");
    if image_only && host::find_program("mmdebstrap").is_some() {
        println!(
            "building the demo's container image into {} (once; about a minute)",
            state_dir.join("images").display()
        );
        match build_default_image(state_dir).await {
            Ok(()) => return local(),
            Err(e) => return host_because(&format!("building the default image failed ({e:#})")),
        }
    }
    match failing.first() {
        None => local(),
        Some(first) => host_because(&reason(first, failing.len())),
    }
}

fn local() -> Choice {
    Choice {
        backend: &sandbox::local::PLUGIN,
        message: "using the local backend (containers)".to_owned(),
    }
}

fn host_because(reason: &str) -> Choice {
    Choice {
        backend: &sandbox::host::PLUGIN,
        message: format!(
            "using the host backend: {reason}; run scripts/setup as root for containers \
             (`garrison doctor --backend local` lists what is missing)"
        ),
    }
}

/// "runc: /usr/sbin/runc not found", plus how many other checks failed.
fn reason(first: &Check, failing: usize) -> String {
    let mut reason = format!("{}: {}", first.name, first.detail);
    if failing > 1 {
        reason.push_str(&format!(
            " (and {} more missing prerequisite{})",
            failing - 1,
            if failing == 2 { "" } else { "s" }
        ));
    }
    reason
}

async fn build_default_image(state_dir: &Path) -> anyhow::Result<()> {
    let store = ImageStore::open(&state_dir.join("images"))?;
    store
        .build(DEFAULT_IMAGE, &Recipe::default_recipe(), &NoProgress)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reason_names_the_first_missing_piece_and_counts_the_rest() {
        let first = Check::fail("runc", "/usr/sbin/runc not found", "apt-get install runc");
        assert_eq!(reason(&first, 1), "runc: /usr/sbin/runc not found");
        assert_eq!(
            reason(&first, 3),
            "runc: /usr/sbin/runc not found (and 2 more missing prerequisites)"
        );
        let msg = host_because("root: running as uid 1000").message;
        assert!(msg.starts_with("using the host backend: root: running as uid 1000;"));
        assert!(msg.contains("run scripts/setup as root for containers"));
    }
}
