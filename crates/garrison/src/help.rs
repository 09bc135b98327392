//! The closing sections every command's `--help` (and so its man page)
//! has: examples, for the commands that do not carry their own next to
//! their flags, and the exit status, from one table. A command missing
//! from the table has neither, which the test below catches.

use clap::Command;

/// What most commands exit with.
const STANDARD: &str = "  0  done
  1  failed; the message on stderr says what failed and what to do
  2  usage error: an unknown flag or a value that is not accepted";

/// A command that runs until it is stopped.
const SERVICE: &str = "  0  stopped by SIGTERM or Ctrl-C
  1  failed to start, or failed while running
  2  usage error: an unknown flag or a value that is not accepted";

/// Benchmarks report figures whether or not they meet their targets.
const BENCH: &str = "  0  the figures were printed, whether or not they meet their targets
  1  the benchmark could not run (the message says why)
  2  usage error: an unknown flag or a value that is not accepted";

const DEPLOY: &str = "  0  done; with --status: the deployed serve runs
  1  failed; the message on stderr says what failed and what to do
  2  usage error: an unknown flag or a value that is not accepted
  3  with --status: the deployed serve does not run, or there is no sandbox";

/// One command's sections: its path below `garrison` (`""` for
/// `garrison` itself), examples unless the command has its own, and its
/// exit status.
struct Sections {
    path: &'static str,
    examples: Option<&'static str>,
    exit_status: &'static str,
}

const fn own_examples(path: &'static str, exit_status: &'static str) -> Sections {
    Sections {
        path,
        examples: None,
        exit_status,
    }
}

const fn with_examples(
    path: &'static str,
    examples: &'static str,
    exit_status: &'static str,
) -> Sections {
    Sections {
        path,
        examples: Some(examples),
        exit_status,
    }
}

const TABLE: &[Sections] = &[
    with_examples(
        "",
        "  garrison connect                 # link this machine to Devin (once)
  garrison doctor                  # check what serve needs
  garrison serve                   # serve the connected outpost's sessions
  garrison status                  # the running daemon's health
  garrison sessions --json | jq .  # its sessions, for scripts
  garrison demo                    # try it without a Devin account

Output:
  Results go to stdout, notes and logs to stderr. Commands that list or
  report take --json. A reader that closes stdout early (`| head`) ends the
  command quietly, with exit status 0.",
        "  0  done (each command's --help says what else it may exit with)
  1  failed; the message on stderr says what failed and what to do
  2  usage error: an unknown flag or a value that is not accepted",
    ),
    own_examples(
        "serve",
        "  0   stopped by SIGTERM or Ctrl-C (after the running sessions with --drain)
  1   failed at start or while running (e.g. the --listen address is in use)
  2   usage error: an unknown flag or a value that is not accepted
  78  configuration error that retrying cannot fix: a bad setting or config
      file, a state directory this user cannot write, or, checked once at
      start by listing each outpost's queue, a token the API refuses
      (401/403) or an outpost it does not know (404); the systemd unit does
      not restart on it (RestartPreventExitStatus=78)
  A fleet API that does not answer at start (connection refused, DNS, TLS,
  timeout, 5xx) is no exit: serve starts, logs the cause and retries, and is
  not ready until the API answers. A refusal after start makes the outpost
  not ready (garrison status exits 1) and is logged at error level once a
  minute; running sessions go on.",
    ),
    with_examples(
        "emulate",
        "  garrison emulate                                   # on 127.0.0.1:8790
  garrison emulate --listen 127.0.0.1:9000 --outpost-name lab",
        SERVICE,
    ),
    with_examples(
        "bench",
        "  garrison bench queue --sessions 50
  garrison bench sandbox --sessions 10      # as root, local backend
  garrison bench scale --sessions 200 --json",
        BENCH,
    ),
    with_examples(
        "bench queue",
        "  garrison bench queue
  garrison bench queue --sessions 50 --json | tail -1 | jq .",
        BENCH,
    ),
    with_examples(
        "bench sandbox",
        "  garrison bench sandbox                    # as root: local backend, runc
  garrison bench sandbox --sessions 10 --runtime runsc",
        BENCH,
    ),
    with_examples(
        "bench chaos",
        "  garrison bench chaos                      # as root: 3 hosts, 3 minutes, random seed
  garrison bench chaos --minutes 2 --seed 20261202 --json | tail -1 | jq .violations",
        BENCH,
    ),
    with_examples(
        "bench scale",
        "  garrison bench scale
  garrison bench scale --sessions 200 --hold-secs 60 --json",
        BENCH,
    ),
    own_examples("connect", STANDARD),
    own_examples("outposts", STANDARD),
    with_examples(
        "outposts list",
        "  garrison outposts list
  garrison outposts list --json | jq -r '.[].metadata.outpost_id'",
        STANDARD,
    ),
    with_examples(
        "outposts create",
        "  garrison outposts create lab-runners
  garrison outposts create mac-lab --platform macos --description \"Mac minis\"",
        STANDARD,
    ),
    with_examples(
        "outposts delete",
        "  garrison outposts delete outpost_env-...",
        STANDARD,
    ),
    own_examples(
        "status",
        "  0  the daemon is ready
  1  the daemon runs but is not ready (the line under the first says why),
     or another failure
  2  the daemon is not reachable (the state store's view is printed when it
     can be read, and a line on stderr says so); also a usage error",
    ),
    own_examples("sessions", STANDARD),
    own_examples(
        "logs",
        "  0  printed; with -f: the session is over here
  1  failed, or no such session is known here
  2  usage error: an unknown flag or a value that is not accepted",
    ),
    own_examples(
        "terminate",
        "  0  the daemon accepted the request (the session winds down after it)
  1  failed: no such session, not active here, or no daemon to ask
  2  usage error: an unknown flag or a value that is not accepted",
    ),
    with_examples(
        "image",
        "  garrison image build default          # as root: the image local sessions use
  garrison image ls
  garrison image rm old-image",
        STANDARD,
    ),
    with_examples(
        "image build",
        "  garrison image build default
  garrison image build py --recipe py.toml
  garrison image build desktop --recipe desktop   # a built-in recipe (image recipes)
  garrison image build default --backend modal
  garrison image build garrison-session --backend tensorlake",
        STANDARD,
    ),
    with_examples(
        "image import",
        "  docker save my-image:latest | zstd > my-image.tar.zst
  garrison image import my-image my-image.tar.zst",
        STANDARD,
    ),
    with_examples(
        "image ls",
        "  garrison image ls
  garrison image ls --json | jq -r '.[].name'
  garrison image ls --backend tensorlake",
        STANDARD,
    ),
    with_examples(
        "image rm",
        "  garrison image rm old-image
  garrison image rm garrison-session --backend tensorlake",
        STANDARD,
    ),
    with_examples("image prune", "  garrison image prune", STANDARD),
    with_examples(
        "image recipes",
        "  garrison image recipes
  garrison image recipes --json | jq -r '.[].name'
  garrison image build desktop --recipe desktop
  garrison image build desktop --recipe desktop --backend modal",
        STANDARD,
    ),
    with_examples(
        "demo",
        "  garrison demo
  garrison demo --backend host --state-dir /tmp/garrison-demo
  garrison demo --keep-running          # the dashboard stays up until Ctrl-C",
        "  0  every expectation passed
  1  an expectation failed, or the demo could not run
  2  usage error: an unknown flag or a value that is not accepted",
    ),
    with_examples(
        "doctor",
        "  garrison doctor
  garrison doctor --backend local --state-dir /srv/garrison
  garrison doctor --json | jq '.sections[].checks[] | select(.outcome == \"fail\")'",
        "  0  every required check passed (warnings may remain)
  1  a required check failed; its line says what to do
  2  usage error: an unknown flag or a value that is not accepted",
    ),
    with_examples(
        "deploy",
        "  garrison deploy tensorlake
  garrison deploy modal --status",
        DEPLOY,
    ),
    own_examples("deploy tensorlake", DEPLOY),
    own_examples("deploy modal", DEPLOY),
    with_examples(
        "mock",
        "  TENSORLAKE_API_KEY=tl_try garrison mock tensorlake --root /tmp/tl-mock",
        SERVICE,
    ),
    own_examples("mock tensorlake", SERVICE),
    own_examples("mock modal", SERVICE),
    with_examples(
        "completions",
        "  garrison completions bash > /etc/bash_completion.d/garrison
  garrison completions zsh > \"${fpath[1]}/_garrison\"
  garrison completions fish > ~/.config/fish/completions/garrison.fish",
        STANDARD,
    ),
    with_examples(
        "man",
        "  garrison man /usr/local/share/man/man1 && man garrison-serve",
        STANDARD,
    ),
];

/// Adds the sections to `cmd` and every command below it.
pub(crate) fn decorate(cmd: Command) -> Command {
    decorate_at(cmd, "")
}

fn decorate_at(cmd: Command, path: &str) -> Command {
    let cmd = match TABLE.iter().find(|s| s.path == path) {
        Some(sections) => {
            let own = cmd
                .get_after_help()
                .map(ToString::to_string)
                .unwrap_or_default();
            let text = closing_text(&own, sections);
            cmd.after_help(text)
        }
        None => cmd,
    };
    let path = path.to_owned();
    cmd.mut_subcommands(|sub| {
        let sub_path = if path.is_empty() {
            sub.get_name().to_owned()
        } else {
            format!("{path} {}", sub.get_name())
        };
        decorate_at(sub, &sub_path)
    })
}

/// The command's own closing text with the table's sections added.
fn closing_text(own: &str, sections: &Sections) -> String {
    let mut parts: Vec<String> = Vec::new();
    if !has_examples(own)
        && let Some(examples) = sections.examples
    {
        parts.push(format!("Examples:\n{examples}"));
    }
    if !own.is_empty() {
        parts.push(own.to_owned());
    }
    if !own.contains("Exit status:") {
        parts.push(format!("Exit status:\n{}", sections.exit_status));
    }
    parts.join("\n\n")
}

fn has_examples(text: &str) -> bool {
    text.lines()
        .any(|line| line == "Examples:" || line == "Example:")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every command and its path below `garrison`.
    fn walk(cmd: &Command, path: &str, out: &mut Vec<(String, Command)>) {
        out.push((path.to_owned(), cmd.clone()));
        for sub in cmd.get_subcommands() {
            if sub.get_name() == "help" {
                continue;
            }
            let sub_path = if path.is_empty() {
                sub.get_name().to_owned()
            } else {
                format!("{path} {}", sub.get_name())
            };
            walk(sub, &sub_path, out);
        }
    }

    fn all_commands() -> Vec<(String, Command)> {
        let mut cmd = crate::command();
        cmd.build();
        let mut out = Vec::new();
        walk(&cmd, "", &mut out);
        out
    }

    #[test]
    fn every_command_help_has_an_example_and_its_exit_status() {
        let commands = all_commands();
        assert!(commands.len() > 30, "{}", commands.len());
        for (path, mut cmd) in commands {
            for help in [cmd.render_help(), cmd.render_long_help()] {
                let help = help.to_string();
                assert!(
                    has_examples(&help),
                    "`garrison {path} --help` has no Examples section:\n{help}"
                );
                let status = help.split("\nExit status:\n").nth(1).unwrap_or_else(|| {
                    panic!("`garrison {path} --help` has no Exit status:\n{help}")
                });
                assert!(status.contains("  0  "), "{path}: {status}");
                assert!(status.contains("  2  "), "{path}: {status}");
                assert_eq!(
                    help.matches("\nExit status:\n").count(),
                    1,
                    "{path}: {help}"
                );
            }
        }
    }

    #[test]
    fn the_table_names_only_commands_that_exist() {
        let paths: Vec<String> = all_commands().into_iter().map(|(p, _)| p).collect();
        for sections in TABLE {
            assert!(
                paths.iter().any(|p| p == sections.path),
                "no command `garrison {}`",
                sections.path
            );
        }
    }

    #[test]
    fn serve_and_status_document_their_own_exit_codes() {
        let commands = all_commands();
        let help = |name: &str| {
            let (_, mut cmd) = commands
                .iter()
                .find(|(p, _)| p == name)
                .cloned()
                .expect("command exists");
            cmd.render_long_help().to_string()
        };
        assert!(help("serve").contains("  78  configuration error"));
        let status = help("status");
        assert!(status.contains("  1  the daemon runs but is not ready"));
        assert!(status.contains("  2  the daemon is not reachable"));
    }
}
