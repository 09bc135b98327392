//! How the simulator ends, and the exit code each ending maps to.
//!
//! Orchestrators tell a clean session end from a failure by the exit code
//! alone, so every way out of the program goes through [`Outcome`] — except
//! the gateway's `crash` message, which exits with the code it names at
//! once, as a real crash would (see `session.rs`).

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The gateway said the session slept or ended.
    Clean,
    /// The connection was lost or broken before sleep/end.
    Lost,
    /// Bad arguments or environment.
    Usage,
    /// The gateway answered the handshake with a refusal (4xx).
    Refused,
    /// The gateway could not be reached within the connect budget.
    Unreachable,
}

impl Outcome {
    pub(crate) fn code(self) -> i32 {
        match self {
            Outcome::Clean => 0,
            Outcome::Lost => 1,
            Outcome::Usage => 2,
            Outcome::Refused => 3,
            Outcome::Unreachable => 4,
        }
    }
}
