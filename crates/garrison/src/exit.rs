//! The exit codes of `garrison`, in one place, and how an error becomes
//! one. Commands return errors as usual; [`code_of`] picks the code from
//! the error's type, and [`Code`] lets a command that already printed its
//! answer (`status`) end with a chosen code and no message.

use std::process::ExitCode;

/// It worked.
pub(crate) const SUCCESS: u8 = 0;
/// Something failed that may work when tried again, or that no other
/// code describes.
pub(crate) const FAILURE: u8 = 1;
/// The command line is wrong. clap exits with it itself; it is named here
/// so that every code is in one place.
#[allow(dead_code)]
pub(crate) const USAGE: u8 = 2;
/// A configuration error (EX_CONFIG from sysexits.h): a bad setting or
/// file, a token the API refuses, an outpost it does not know, a state
/// directory that cannot be written. Restarting will not help; the
/// systemd unit does not restart on it (`RestartPreventExitStatus=78`).
pub(crate) const CONFIG: u8 = 78;

/// Ends the command with exit code `CODE` and nothing more printed: the
/// command has said what it had to (`status`: 1 not ready, 2 not
/// reachable). [`code_of`] reads back codes 1 and 2, the ones `status`
/// ends with; a command that needs another adds it to `bare_code`.
#[derive(Debug)]
pub(crate) struct Code<const CODE: u8>;

impl<const CODE: u8> std::fmt::Display for Code<CODE> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit code {CODE}")
    }
}

impl<const CODE: u8> std::error::Error for Code<CODE> {}

/// The code of a bare [`Code`], if `cause` is one.
fn bare_code(cause: &(dyn std::error::Error + 'static)) -> Option<u8> {
    if cause.is::<Code<1>>() {
        Some(1)
    } else if cause.is::<Code<2>>() {
        Some(2)
    } else {
        None
    }
}

/// An error that is a configuration error whatever its type: `serve`
/// wraps what resolving its settings failed with.
#[derive(Debug)]
pub(crate) struct Config(pub anyhow::Error);

impl std::fmt::Display for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `{:#}`: the whole chain on one line, as anyhow would print it.
        write!(f, "{:#}", self.0)
    }
}

impl std::error::Error for Config {}

/// Marks `error` as a configuration error (exit code [`CONFIG`]).
pub(crate) fn config(error: anyhow::Error) -> anyhow::Error {
    anyhow::Error::new(Config(error))
}

/// The exit code for a command's error: the first error in its chain that
/// has a code of its own decides, else [`FAILURE`].
pub(crate) fn code_of(error: &anyhow::Error) -> u8 {
    for cause in error.chain() {
        if let Some(code) = bare_code(cause) {
            return code;
        }
        if cause.is::<Config>()
            || cause.is::<orchestrator::Misconfigured>()
            || cause.is::<orchestrator::PlatformRefused>()
        {
            return CONFIG;
        }
    }
    FAILURE
}

/// Ends the process for a command's result: the error printed (unless it
/// is a bare [`Code`]) and its exit code.
pub(crate) fn report(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::from(SUCCESS),
        Err(error) => {
            if !(error.is::<Code<1>>() || error.is::<Code<2>>()) {
                eprint!("{}", message(&error));
            }
            ExitCode::from(code_of(&error))
        }
    }
}

/// `Error: ...` and its causes, as `main` returning the error would print
/// it, but never with a backtrace (which `RUST_BACKTRACE=1` would add): an
/// operator's error is its message, not our stack.
pub(crate) fn message(error: &anyhow::Error) -> String {
    let mut out = format!("Error: {error}\n");
    let causes: Vec<String> = error.chain().skip(1).map(|c| c.to_string()).collect();
    if !causes.is_empty() {
        out.push_str("\nCaused by:\n");
        for (i, cause) in causes.iter().enumerate() {
            if causes.len() == 1 {
                out.push_str(&format!("    {cause}\n"));
            } else {
                out.push_str(&format!("    {i}: {cause}\n"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_their_codes() {
        assert_eq!(code_of(&anyhow::anyhow!("boom")), FAILURE);
        assert_eq!(code_of(&Code::<USAGE>.into()), 2);
        assert_eq!(
            code_of(&anyhow::Error::new(Code::<FAILURE>).context("status")),
            1
        );
        let refused = anyhow::Error::new(orchestrator::Misconfigured("refused".into()));
        assert_eq!(code_of(&refused), CONFIG);
        // Found through context added on the way up.
        assert_eq!(code_of(&refused.context("starting")), CONFIG);
        assert_eq!(code_of(&config(anyhow::anyhow!("bad --cpus"))), CONFIG);
    }

    #[test]
    fn errors_print_with_their_causes_as_anyhow_would() {
        let one = anyhow::anyhow!("inner").context("outer");
        assert_eq!(message(&one), "Error: outer\n\nCaused by:\n    inner\n");
        let two = one.context("top");
        assert_eq!(
            message(&two),
            "Error: top\n\nCaused by:\n    0: outer\n    1: inner\n"
        );
        assert_eq!(message(&anyhow::anyhow!("alone")), "Error: alone\n");
    }

    #[test]
    fn a_config_error_reads_as_the_error_it_wraps() {
        let wrapped = config(anyhow::anyhow!("invalid --cpus: 0").context("resolving"));
        assert_eq!(wrapped.to_string(), "resolving: invalid --cpus: 0");
    }
}
