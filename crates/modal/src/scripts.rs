//! The POSIX shell run inside a Modal sandbox, and the pure helpers that
//! build its arguments.
//!
//! A process Garrison spawns must outlive the exec that started it being
//! watched, report its exit code after an orchestrator restart, and be
//! found by its name. So each one gets a directory `<root>/proc/<name>/`
//! written by a small launcher: `pid`, `output.log` and, once it ended,
//! `exit`. Later calls read those files with short execs.

use std::collections::BTreeMap;

/// Where Garrison keeps its things, relative to the sandbox's starting
/// directory (`/` in a Modal image unless its Dockerfile says `WORKDIR`).
pub(crate) const ROOT_DIR: &str = "garrison";

/// Creates the layout and prints the absolute root. Run with no workdir.
pub(crate) const SETUP: &str = "set -e; umask 077; \
    mkdir -p garrison/workspace garrison/state garrison/bin garrison/home garrison/proc; \
    cd garrison; pwd -P";

/// `sh -c LAUNCH sh DIR ARGV...` with the environment script in the
/// variable [`LAUNCH_ENV`] (sent in the exec's environment map, never on a
/// command line): claims DIR (failing with 17 if the name is taken), stores the
/// environment privately, starts ARGV in its own session with exactly that
/// environment and output to `output.log`, prints `started`, and records
/// the exit code when ARGV ends (128 + N for signal N).
pub(crate) const LAUNCH: &str = r#"d="$1"; shift
mkdir "$d" 2>/dev/null || { echo exists; exit 17; }
echo "$$" > "$d/launcher"
(umask 077; printf '%s' "$GARRISON_LAUNCH_ENV" > "$d/env") || { rm -rf "$d"; exit 18; }
unset GARRISON_LAUNCH_ENV
setsid env -i /bin/sh -c '. "$0/env"; rm -f "$0/env"; exec "$@"' "$d" "$@" > "$d/output.log" 2>&1 < /dev/null &
child=$!
echo "$child" > "$d/pid"
echo started
wait "$child"
code=$?
echo "$code" > "$d/exit.tmp" && mv -f "$d/exit.tmp" "$d/exit""#;

/// The variable [`LAUNCH`] reads the process's environment script from.
pub(crate) const LAUNCH_ENV: &str = "GARRISON_LAUNCH_ENV";

/// Exit code of [`LAUNCH`] when the process name is taken.
pub(crate) const LAUNCH_EXISTS: i32 = 17;

/// `sh -c STATUS sh DIR`: prints `exit N`, `running` (also while the
/// launcher is still starting it, or has yet to record the exit code of a
/// process that just ended), `lost` (gone without an exit code and without
/// its launcher) or `none`.
pub(crate) const STATUS: &str = r#"d="$1"
if [ -f "$d/exit" ]; then echo "exit $(cat "$d/exit")"; exit 0; fi
if [ ! -d "$d" ]; then echo none; exit 0; fi
if [ -f "$d/pid" ] && kill -0 "$(cat "$d/pid")" 2>/dev/null; then echo running; exit 0; fi
if [ -f "$d/exit" ]; then echo "exit $(cat "$d/exit")"; exit 0; fi
if kill -0 "$(cat "$d/launcher" 2>/dev/null)" 2>/dev/null; then echo running; exit 0; fi
if [ -f "$d/exit" ]; then echo "exit $(cat "$d/exit")"; exit 0; fi
echo lost"#;

/// `sh -c KILL sh DIR TENTHS`: SIGTERM to the process's session group,
/// up to TENTHS tenths of a second to go, then SIGKILL. Nothing to do for
/// an unknown or finished process.
pub(crate) const KILL: &str = r#"d="$1"; n="$2"
[ -f "$d/exit" ] && exit 0
pid=$(cat "$d/pid" 2>/dev/null) || exit 0
kill -TERM "-$pid" 2>/dev/null || exit 0
i=0
while [ "$i" -lt "$n" ] && kill -0 "-$pid" 2>/dev/null; do sleep 0.1; i=$((i+1)); done
kill -KILL "-$pid" 2>/dev/null
exit 0"#;

/// `sh -c READ sh DIR OFFSET MAX`: up to MAX bytes of `output.log` from
/// OFFSET; exits 3 when the process is unknown.
pub(crate) const READ: &str = r#"d="$1"
[ -d "$d" ] || exit 3
[ -f "$d/output.log" ] || exit 0
tail -c +"$(($2 + 1))" "$d/output.log" | head -c "$3""#;

/// Exit code of [`READ`] for an unknown process.
pub(crate) const READ_UNKNOWN: i32 = 3;

/// `sh -c WRITE sh PATH MODE` with the content on stdin: writes it next to
/// PATH and renames it into place, so readers never see half a file.
pub(crate) const WRITE: &str = r#"set -e
t="$1.garrison-tmp"
mkdir -p "$(dirname "$1")"
rm -f "$t"
cat > "$t"
chmod "$2" "$t"
mv -f "$t" "$1""#;

/// The entry point a sandbox runs while Garrison uses it through execs.
pub(crate) fn entrypoint() -> Vec<String> {
    vec!["sleep".into(), "infinity".into()]
}

/// `argv` for `sh -c SCRIPT sh ARGS...`.
pub(crate) fn sh(script: &str, args: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut argv = vec!["/bin/sh".to_owned(), "-c".to_owned(), script.to_owned()];
    argv.push("sh".to_owned());
    argv.extend(args);
    argv
}

/// A shell script that sets exactly `env` once sourced by a `sh` started
/// with an empty environment (which adds `PWD` of its own, so that is
/// removed unless given). `None` when a name is not a shell variable name.
pub(crate) fn env_script(env: &BTreeMap<String, String>) -> Option<String> {
    let mut script = String::from("unset PWD OLDPWD\n");
    for (name, value) in env {
        let valid = name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !valid || value.contains('\0') {
            return None;
        }
        script.push_str(&format!("export {name}={}\n", quote(value)));
    }
    Some(script)
}

/// Single-quotes `value` for `sh`.
pub(crate) fn quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}

/// Checks that `path` is absolute, plain (no `.`/`..`, no empty parts) and
/// inside `root`. Paths come from the orchestrator; this keeps a bad one
/// from writing over the sandbox's system files.
pub(crate) fn inside(root: &str, path: &str) -> bool {
    let Some(rest) = path.strip_prefix(root).and_then(|r| r.strip_prefix('/')) else {
        return false;
    };
    !rest.is_empty()
        && rest
            .split('/')
            .all(|part| !part.is_empty() && part != "." && part != "..")
}

/// The parsed output of [`STATUS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reported {
    /// Ended with this code.
    Exited(i32),
    /// Still running.
    Running,
    /// Gone without an exit code (its launcher died).
    Lost,
    /// Never spawned in this sandbox.
    Unknown,
}

/// Reads [`STATUS`]'s output; `None` if it is not one of its lines.
pub(crate) fn parse_status(output: &str) -> Option<Reported> {
    let line = output.trim();
    match line {
        "running" => Some(Reported::Running),
        "lost" => Some(Reported::Lost),
        "none" => Some(Reported::Unknown),
        _ => line
            .strip_prefix("exit ")
            .and_then(|code| code.trim().parse().ok())
            .map(Reported::Exited),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_script_quotes_values_and_refuses_bad_names() {
        let env = BTreeMap::from([
            ("A".to_owned(), "it's $HOME `x`".to_owned()),
            ("B_2".to_owned(), String::new()),
        ]);
        let script = env_script(&env).unwrap();
        assert_eq!(
            script,
            "unset PWD OLDPWD\nexport A='it'\\''s $HOME `x`'\nexport B_2=''\n"
        );
        for bad in ["1A", "A-B", "", "A B"] {
            let env = BTreeMap::from([(bad.to_owned(), "v".to_owned())]);
            assert_eq!(env_script(&env), None, "{bad}");
        }
    }

    #[test]
    fn env_script_sets_exactly_the_environment() {
        let env = BTreeMap::from([
            ("PATH".to_owned(), "/usr/bin:/bin".to_owned()),
            ("Q".to_owned(), "a 'b' \"c\"\nd".to_owned()),
        ]);
        let script = env_script(&env).unwrap();
        let out = std::process::Command::new("env")
            .args([
                "-i",
                "/bin/sh",
                "-c",
                &format!("{script}exec /usr/bin/env -0"),
            ])
            .output()
            .unwrap();
        let mut seen: Vec<String> = String::from_utf8(out.stdout)
            .unwrap()
            .split('\0')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        seen.sort();
        assert_eq!(seen, ["PATH=/usr/bin:/bin", "Q=a 'b' \"c\"\nd"]);
    }

    #[test]
    fn launch_gives_the_process_exactly_the_environment_from_the_variable() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("p");
        let env = BTreeMap::from([("ONLY".to_owned(), "this 'one'".to_owned())]);
        let out = std::process::Command::new("/bin/sh")
            .args(["-c", LAUNCH, "sh"])
            .arg(&d)
            .args(["/usr/bin/env", "-0"])
            .env(LAUNCH_ENV, env_script(&env).unwrap())
            .env("LEAKED", "no")
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "started\n");
        assert_eq!(std::fs::read_to_string(d.join("exit")).unwrap().trim(), "0");
        let seen = std::fs::read_to_string(d.join("output.log")).unwrap();
        assert_eq!(seen, "ONLY=this 'one'\0");
        assert!(!d.join("env").exists());
    }

    #[test]
    fn paths_must_be_plain_and_inside_the_root() {
        assert!(inside("/garrison", "/garrison/bin/devin-remote"));
        for bad in [
            "/garrison",
            "/garrison/",
            "/garrisonx/a",
            "/garrison/../etc/passwd",
            "/garrison/a//b",
            "/garrison/./a",
            "relative/path",
            "/etc/passwd",
        ] {
            assert!(!inside("/garrison", bad), "{bad}");
        }
    }

    fn status_of(dir: &std::path::Path) -> String {
        let out = std::process::Command::new("/bin/sh")
            .args(["-c", STATUS, "sh"])
            .arg(dir)
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    #[test]
    fn a_launcher_that_died_before_starting_the_process_is_lost_not_running() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("p");
        assert_eq!(status_of(&d), "none");
        std::fs::create_dir(&d).unwrap();
        // Still starting: the launcher (this test) is alive.
        std::fs::write(d.join("launcher"), std::process::id().to_string()).unwrap();
        assert_eq!(status_of(&d), "running");
        // A launcher that is gone, with no pid written: lost.
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        let pid = gone.id();
        gone.wait().unwrap();
        std::fs::write(d.join("launcher"), pid.to_string()).unwrap();
        assert_eq!(status_of(&d), "lost");
        std::fs::remove_file(d.join("launcher")).unwrap();
        assert_eq!(status_of(&d), "lost");
        // The process ended, its launcher is alive and about to record the
        // exit code: still running, not lost.
        std::fs::write(d.join("pid"), pid.to_string()).unwrap();
        std::fs::write(d.join("launcher"), std::process::id().to_string()).unwrap();
        assert_eq!(status_of(&d), "running");
        std::fs::remove_file(d.join("launcher")).unwrap();
        assert_eq!(status_of(&d), "lost");
        std::fs::write(d.join("exit"), "3").unwrap();
        assert_eq!(status_of(&d), "exit 3");
    }

    #[test]
    fn status_lines() {
        assert_eq!(parse_status("exit 3\n"), Some(Reported::Exited(3)));
        assert_eq!(parse_status("running\n"), Some(Reported::Running));
        assert_eq!(parse_status("lost"), Some(Reported::Lost));
        assert_eq!(parse_status("none"), Some(Reported::Unknown));
        assert_eq!(parse_status("exit x"), None);
        assert_eq!(parse_status(""), None);
    }
}
