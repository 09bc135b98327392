//! The conformance suite every backend must pass.
//!
//! Each check is a plain async function over a [`Harness`], so a backend's
//! test file instantiates all of them with [`conformance_tests!`]:
//!
//! ```ignore
//! sandbox::conformance_tests!(my_harness().await);
//! // A backend that needs what not every machine has (root, an image):
//! sandbox::conformance_tests!(optional: harness_if_possible());
//! ```
//!
//! The checks use only `/bin/sh` and coreutils inside the sandbox, which
//! every image Garrison builds has.

mod files;
mod harness;
mod processes;
mod sandboxes;
mod suspend;

pub use files::*;
pub use harness::Harness;
pub use processes::*;
pub use sandboxes::*;
pub use suspend::*;

/// Instantiates every conformance check as a `#[tokio::test]`.
///
/// `conformance_tests!(harness)` takes an expression that evaluates (inside
/// an async context) to a [`Harness`]. `conformance_tests!(optional:
/// harness)` takes one that evaluates to an `Option<Harness>`, for a backend
/// that cannot run everywhere: on `None` each test passes without checking
/// anything, so the expression should say why it gave none.
///
/// The list of checks is here and nowhere else, so a new check runs on every
/// backend; the unit test below fails if a `pub async fn` of this module is
/// missing from it.
#[macro_export]
macro_rules! conformance_tests {
    // Hands the list of checks to another arm, so it is written only once.
    (@checks $($then:tt)*) => {
        // Braces, not parentheses and a semicolon: the expansion is items
        // for `@each` and an expression for `@names`.
        $crate::conformance_tests! {$($then)*;
            runs_a_process_and_reports_its_exit_code,
            process_sees_exactly_the_given_environment,
            runs_in_the_workdir,
            runs_below_the_workdir_and_keeps_state_outside,
            put_file_writes_an_executable,
            put_executable_places_a_runnable_copy,
            put_file_refuses_paths_outside,
            kill_stops_a_running_process,
            snapshot_restores_the_workspace,
            restore_from_a_missing_snapshot_is_gone,
            list_finds_sandboxes_with_labels_and_destroy_is_idempotent,
            destroy_stops_processes_and_status_is_gone,
            process_names_are_unique,
            processes_survive_a_restart_of_the_orchestrator,
            processes_survive_suspend_and_resume,
        }
    };
    (@names; $($check:ident),+ $(,)?) => {
        [$(stringify!($check)),+]
    };
    (@each $harness:expr; $($check:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() {
                let Some(harness) = $harness else { return };
                $crate::conformance::$check(&harness).await.unwrap();
            }
        )+
    };
    (optional: $harness:expr) => {
        $crate::conformance_tests!(@checks @each $harness);
    };
    ($harness:expr) => {
        $crate::conformance_tests!(@checks @each ::core::option::Option::Some($harness));
    };
}

#[cfg(test)]
mod tests {
    /// Every `pub async fn` at the start of a line of the check files is a
    /// check; helpers are methods of [`super::Harness`] or private.
    #[test]
    fn the_macro_lists_every_check() {
        let mut defined: Vec<&str> = [
            include_str!("conformance/processes.rs"),
            include_str!("conformance/files.rs"),
            include_str!("conformance/sandboxes.rs"),
            include_str!("conformance/suspend.rs"),
        ]
        .iter()
        .flat_map(|file| file.lines())
        .filter_map(|line| line.strip_prefix("pub async fn "))
        .map(|rest| rest.split(['(', '<']).next().unwrap_or(rest).trim())
        .collect();
        let mut listed: Vec<&str> = crate::conformance_tests!(@checks @names).to_vec();
        defined.sort_unstable();
        listed.sort_unstable();
        assert!(!defined.is_empty(), "no checks found in the source");
        assert_eq!(
            defined, listed,
            "conformance_tests! must list exactly the pub async fns of conformance/"
        );
    }
}
