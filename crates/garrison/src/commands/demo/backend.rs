//! Which backend the demo runs its sessions on, and why.
//!
//! `local` (containers) when none of the checks `garrison doctor` calls
//! required fails for it; else `host`, naming the missing piece and the one
//! command that fixes it. When the only missing piece is the `default`
//! image, it is built once into the demo's state directory, with `garrison
//! image build`'s progress display, whether `--backend local` was given or
//! not: a new user running `scripts/demo` as root gets containers without a
//! further step.
//!
//! [`plan`] decides from the checks alone; [`choose`] carries the plan out
//! with the image builder it is given.

use std::path::Path;

use ::local::images::{DEFAULT_IMAGE, ImageStore, Recipe};
use sandbox::plugin::{BackendPlugin, ConfiguredBackend};

use crate::commands::doctor::check::Check;

/// The backend to use and the sentence that says so.
pub(super) struct Choice {
    pub backend: &'static dyn BackendPlugin,
    pub message: String,
}

/// What the local backend lacks here, and the one command that fixes it.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Missing {
    pub what: String,
    pub fix: String,
}

/// What the demo does about its backend.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Plan {
    /// Containers: everything they need is here.
    Local,
    /// Containers, once the `default` image (all that is missing) is built.
    BuildImage,
    /// The host backend: asked for (`None`), or the local one lacks something.
    Host(Option<Missing>),
    /// `--backend local` was asked for and cannot run here.
    Refuse(Missing),
}

/// Decides from doctor's checks of the local backend. `requested` is the
/// `--backend` given, `mmdebstrap` whether the image builder is installed,
/// `rerun` this command line (what to run again as root).
pub(super) fn plan(
    requested: Option<&str>,
    checks: &[Check],
    mmdebstrap: bool,
    rerun: &str,
) -> Plan {
    if requested == Some("host") {
        return Plan::Host(None);
    }
    let image_missing = checks.iter().any(|c| is_image_check(c) && c.is_blocking());
    let mut missing: Vec<Check> = checks
        .iter()
        .filter(|c| c.is_blocking() && !is_image_check(c))
        .cloned()
        .collect();
    // The demo builds the image itself, so the image is never the missing
    // piece to name; what it is built with is.
    // Without root, other probes fail for that reason alone (user
    // namespaces): root is the one piece to name, and as root the demo
    // checks the rest again.
    if let Some(root) = missing.iter().position(|c| c.name == ROOT_CHECK) {
        missing = vec![missing.swap_remove(root)];
    } else if image_missing && !mmdebstrap {
        missing.push(Check::fail(
            "mmdebstrap",
            "not found (it builds the demo's container image)",
            "apt-get install mmdebstrap (scripts/setup does this)",
        ));
    }
    match (missing.is_empty(), image_missing) {
        (true, false) => Plan::Local,
        (true, true) => Plan::BuildImage,
        (false, _) if requested == Some("local") => Plan::Refuse(describe(&missing, rerun)),
        (false, _) => Plan::Host(Some(describe(&missing, rerun))),
    }
}

/// The first missing piece (and the names of the others), and one command:
/// the piece's own remedy when it is alone, else the setup script.
fn describe(missing: &[Check], rerun: &str) -> Missing {
    let first = &missing[0];
    let mut what = format!("{}: {}", first.name, first.detail);
    if missing.len() > 1 {
        let others: Vec<&str> = missing[1..].iter().map(|c| c.name.as_str()).collect();
        what.push_str(&format!(" (also missing: {})", others.join(", ")));
    }
    let fix = match missing {
        [only] if only.name == ROOT_CHECK => format!("sudo {rerun}"),
        [only] => only.remedy.clone().unwrap_or_default(),
        _ => "scripts/setup (it installs all of them), then the demo again".to_owned(),
    };
    Missing { what, fix }
}

/// The name of doctor's check that this process runs as root.
const ROOT_CHECK: &str = "root";

/// Whether `check` is doctor's check of the `default` image.
fn is_image_check(check: &Check) -> bool {
    check.name == format!("image {DEFAULT_IMAGE:?}")
}

/// Carries out [`plan`]: builds the image with `build` (given the state
/// directory) when that is all that is missing. An error only when
/// `--backend local` was asked for and cannot run.
pub(super) async fn choose(
    requested: Option<&'static dyn BackendPlugin>,
    state_dir: &Path,
    checks: &[Check],
    mmdebstrap: bool,
    rerun: &str,
    build: impl AsyncFnOnce(&Path) -> anyhow::Result<()>,
) -> anyhow::Result<Choice> {
    let asked = requested.map(|b| b.name());
    match plan(asked, checks, mmdebstrap, rerun) {
        Plan::Local => Ok(local(asked)),
        Plan::Host(None) => Ok(Choice {
            backend: &::host::PLUGIN,
            message: "using the host backend (--backend host): sessions are not isolated"
                .to_owned(),
        }),
        Plan::Host(Some(missing)) => Ok(host_because(&missing)),
        Plan::Refuse(missing) => Err(refusal(&missing)),
        Plan::BuildImage => {
            println!(
                "the container image {DEFAULT_IMAGE:?} is missing: building it into {} \
                 (once; about a minute, from Debian's mirrors)",
                state_dir.join("images").display()
            );
            match build(state_dir).await {
                Ok(()) => Ok(local(asked)),
                Err(e) => {
                    let missing = Missing {
                        what: format!("image {DEFAULT_IMAGE:?}: building it failed: {e:#}"),
                        fix: build_command(state_dir),
                    };
                    match asked {
                        Some(_) => Err(refusal(&missing)),
                        None => Ok(host_because(&missing)),
                    }
                }
            }
        }
    }
}

/// Builds the `default` image into `state_dir/images` as `garrison image
/// build` does, progress display included.
pub(super) async fn build_default_image(state_dir: &Path) -> anyhow::Result<()> {
    let store = ImageStore::open(&state_dir.join("images"))?;
    crate::commands::image::build_with_progress(&store, DEFAULT_IMAGE, &Recipe::default_recipe())
        .await?;
    Ok(())
}

/// Doctor's checks of the local backend as `configured` sets it up, and
/// whether the image builder is installed.
pub(super) fn checks_here(
    state_dir: &Path,
    configured: Option<&dyn ConfiguredBackend>,
) -> (Vec<Check>, bool) {
    (
        ::local::PLUGIN
            .prerequisites(configured, state_dir)
            .unwrap_or_default(),
        ::local::find_program("mmdebstrap").is_some(),
    )
}

/// The command that builds the demo's image where the demo looks for it.
fn build_command(state_dir: &Path) -> String {
    format!(
        "garrison image build {DEFAULT_IMAGE} --state-dir {} (as root)",
        state_dir.display()
    )
}

fn local(asked: Option<&str>) -> Choice {
    Choice {
        backend: &::local::PLUGIN,
        message: match asked {
            Some(_) => "using the local backend (containers; --backend local)".to_owned(),
            None => "using the local backend (containers)".to_owned(),
        },
    }
}

fn host_because(missing: &Missing) -> Choice {
    Choice {
        backend: &::host::PLUGIN,
        message: format!(
            "using the host backend, which isolates nothing: the local backend (containers) \
             needs {}\n  for containers: {}",
            missing.what, missing.fix
        ),
    }
}

fn refusal(missing: &Missing) -> anyhow::Error {
    anyhow::anyhow!(
        "the local backend cannot run here: it needs {}\n  to fix it: {}\n  \
         or run the demo without containers: --backend host",
        missing.what,
        missing.fix
    )
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    const RERUN: &str = "garrison demo --keep-running";

    /// A machine with everything but the image, as doctor reports it: the
    /// runtime line is information, not a pass.
    fn ready_but_the_image() -> Vec<Check> {
        vec![
            Check::pass("root", "running as root"),
            Check::pass("runc", "/usr/sbin/runc"),
            Check::info(
                "runtime",
                "runc version 1.1.5+ds1: namespaces, cgroups, dropped capabilities, \
                 no_new_privileges",
            ),
            Check::pass("seccomp", "supported"),
            Check::warn("user namespaces", "turned off", "unset SANDBOX_USERNS"),
            Check::fail(
                format!("image {DEFAULT_IMAGE:?}"),
                "not in /var/lib/garrison/demo/images",
                "garrison image build default --state-dir /var/lib/garrison/demo",
            ),
        ]
    }

    fn ready() -> Vec<Check> {
        let mut checks = ready_but_the_image();
        checks.pop();
        checks.push(Check::pass(
            format!("image {DEFAULT_IMAGE:?}"),
            "abc (240 MiB)",
        ));
        checks
    }

    fn failing(checks: &mut [Check], name: &str, detail: &str, remedy: &str) {
        let check = checks.iter_mut().find(|c| c.name == name).unwrap();
        *check = Check::fail(name, detail, remedy);
    }

    #[test]
    fn information_and_warnings_do_not_stop_containers() {
        assert_eq!(plan(None, &ready(), true, RERUN), Plan::Local);
        assert_eq!(plan(Some("local"), &ready(), false, RERUN), Plan::Local);
    }

    #[test]
    fn a_missing_image_alone_is_built_with_or_without_backend_local() {
        let checks = ready_but_the_image();
        assert_eq!(plan(None, &checks, true, RERUN), Plan::BuildImage);
        assert_eq!(plan(Some("local"), &checks, true, RERUN), Plan::BuildImage);
    }

    #[test]
    fn without_mmdebstrap_the_builder_is_the_missing_piece() {
        let checks = ready_but_the_image();
        assert_eq!(
            plan(None, &checks, false, RERUN),
            Plan::Host(Some(Missing {
                what: "mmdebstrap: not found (it builds the demo's container image)".into(),
                fix: "apt-get install mmdebstrap (scripts/setup does this)".into(),
            }))
        );
        // mmdebstrap only matters when there is an image to build.
        assert_eq!(plan(None, &ready(), false, RERUN), Plan::Local);
    }

    #[test]
    fn one_missing_piece_is_named_with_its_own_remedy() {
        let mut checks = ready();
        failing(
            &mut checks,
            "runc",
            "/usr/sbin/runc not found",
            "apt-get install runc",
        );
        assert_eq!(
            plan(None, &checks, true, RERUN),
            Plan::Host(Some(Missing {
                what: "runc: /usr/sbin/runc not found".into(),
                fix: "apt-get install runc".into(),
            }))
        );
    }

    #[test]
    fn not_root_says_to_run_this_command_as_root_and_hides_the_image() {
        let mut checks = ready_but_the_image();
        failing(&mut checks, "root", "running as uid 1000", "run as root");
        assert_eq!(
            plan(None, &checks, true, RERUN),
            Plan::Host(Some(Missing {
                what: "root: running as uid 1000".into(),
                fix: "sudo garrison demo --keep-running".into(),
            }))
        );
    }

    #[test]
    fn several_missing_pieces_are_all_named_and_fixed_by_setup() {
        let mut checks = ready();
        failing(&mut checks, "runc", "not found", "apt-get install runc");
        failing(&mut checks, "seccomp", "off", "a runc with seccomp");
        let Plan::Host(Some(missing)) = plan(None, &checks, true, RERUN) else {
            panic!("expected the host backend");
        };
        assert_eq!(missing.what, "runc: not found (also missing: seccomp)");
        assert!(missing.fix.starts_with("scripts/setup"), "{}", missing.fix);
        // Not root: that is the piece to name (as root the demo checks
        // the rest again).
        failing(&mut checks, "root", "running as uid 1000", "run as root");
        assert_eq!(
            plan(None, &checks, false, RERUN),
            Plan::Host(Some(Missing {
                what: "root: running as uid 1000".into(),
                fix: "sudo garrison demo --keep-running".into(),
            }))
        );
    }

    #[test]
    fn backend_local_is_refused_rather_than_replaced_and_host_is_taken_as_asked() {
        let mut checks = ready();
        failing(&mut checks, "runc", "not found", "apt-get install runc");
        assert!(matches!(
            plan(Some("local"), &checks, true, RERUN),
            Plan::Refuse(_)
        ));
        assert_eq!(plan(Some("host"), &checks, true, RERUN), Plan::Host(None));
        assert_eq!(plan(Some("host"), &ready(), true, RERUN), Plan::Host(None));
    }

    #[test]
    fn the_image_check_is_recognised_by_doctor_s_name() {
        let dir = tempfile::tempdir().unwrap();
        assert!(is_image_check(&::local::default_image(dir.path())));
    }

    fn run<T>(future: impl Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(future)
    }

    #[test]
    fn when_the_image_is_all_that_is_missing_it_is_built_into_the_state_dir() {
        let state_dir = Path::new("/var/lib/garrison/demo");
        for requested in [None, Some(&::local::PLUGIN as &dyn BackendPlugin)] {
            let built = Cell::new(None);
            let choice = run(choose(
                requested,
                state_dir,
                &ready_but_the_image(),
                true,
                RERUN,
                async |dir: &Path| {
                    built.set(Some(dir.to_owned()));
                    Ok(())
                },
            ))
            .unwrap();
            assert_eq!(built.take().as_deref(), Some(state_dir));
            assert_eq!(choice.backend.name(), "local");
            assert!(choice.message.starts_with("using the local backend"));
        }
    }

    #[test]
    fn nothing_is_built_when_something_else_is_missing_too() {
        let mut checks = ready_but_the_image();
        failing(&mut checks, "runc", "not found", "apt-get install runc");
        let choice = run(choose(
            None,
            Path::new("/d"),
            &checks,
            true,
            RERUN,
            async |_: &Path| panic!("nothing to build"),
        ))
        .unwrap();
        assert_eq!(choice.backend.name(), "host");
        assert_eq!(
            choice.message,
            "using the host backend, which isolates nothing: the local backend (containers) \
             needs runc: not found\n  for containers: apt-get install runc"
        );
    }

    #[test]
    fn a_failed_build_is_named_with_the_command_for_this_state_dir() {
        let fail = async |_: &Path| Err(anyhow::anyhow!("mmdebstrap exited with 1"));
        let choice = run(choose(
            None,
            Path::new("/tmp/d"),
            &ready_but_the_image(),
            true,
            RERUN,
            fail,
        ))
        .unwrap();
        assert_eq!(choice.backend.name(), "host");
        assert!(
            choice
                .message
                .contains("image \"default\": building it failed: mmdebstrap exited with 1"),
            "{}",
            choice.message
        );
        assert!(
            choice
                .message
                .contains("garrison image build default --state-dir /tmp/d"),
            "{}",
            choice.message
        );

        let err = run(choose(
            Some(&::local::PLUGIN),
            Path::new("/tmp/d"),
            &ready_but_the_image(),
            true,
            RERUN,
            fail,
        ))
        .err()
        .expect("--backend local is refused");
        let text = format!("{err:#}");
        assert!(text.contains("--state-dir /tmp/d"), "{text}");
        assert!(text.contains("--backend host"), "{text}");
        assert!(!text.contains("serve"), "{text}");
        // The advice is given once.
        assert_eq!(text.matches("garrison image build").count(), 1, "{text}");
    }
}
