//! `garrison terminate SESSION [--keep-snapshot]`: asks the daemon that
//! holds the session to stop its sandbox, keep or drop its snapshot, and
//! release the claim.

use clap::Args;

use crate::admin_client::AdminError;
use crate::format::printable;
use crate::store_fallback::SourceArgs;

#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  garrison terminate devin-abc123\n  \
    garrison terminate devin-abc123 --keep-snapshot   # keep the workspace for later\n  \
    garrison logs -f devin-abc123                      # watch it wind down")]
pub(crate) struct TerminateArgs {
    #[command(flatten)]
    pub source: SourceArgs,

    /// The session id (`garrison sessions` lists them).
    #[arg(value_name = "SESSION")]
    pub session: String,

    /// Snapshot the workspace before the sandbox is destroyed and keep it
    /// (default: delete every snapshot of the session).
    #[arg(long)]
    pub keep_snapshot: bool,
}

pub(crate) async fn run(args: TerminateArgs) -> anyhow::Result<()> {
    let admin = args.source.admin_client()?;
    let id = printable(&args.session);
    match admin.terminate(&args.session, args.keep_snapshot).await {
        Ok((200..=299, _)) => {
            println!("{}", accepted(&id, args.keep_snapshot));
            Ok(())
        }
        Ok((404, _)) => Err(anyhow::anyhow!(
            "no session {id:?} is known to the daemon at {} (garrison sessions --all lists them)",
            admin.base()
        )),
        Ok((409, message)) => {
            // The stage says why; else the daemon's own words.
            let why = match admin.session(&args.session).await {
                Ok(Some(detail)) => format!(" (stage: {})", printable(&detail.summary.stage)),
                _ if !message.is_empty() => format!(" ({})", printable(&message)),
                _ => String::new(),
            };
            Err(anyhow::anyhow!(
                "session {id:?} is not active here{why}; nothing to terminate"
            ))
        }
        Ok((401, _)) => Err(anyhow::anyhow!(
            "the daemon at {} refused: terminating needs its admin token; run this as a user who can read <state-dir>/{} (the daemon's, given with --state-dir if not the default), or set {}",
            admin.base(),
            orchestrator::ADMIN_TOKEN_FILE,
            orchestrator::ADMIN_TOKEN_ENV,
        )),
        Ok((code, message)) => Err(anyhow::anyhow!(
            "the daemon at {} refused: {}",
            admin.base(),
            AdminError::Status(code, message)
        )),
        Err(e) => Err(anyhow::anyhow!(
            "the daemon at {} is {e}: terminating needs the running `garrison serve` that holds the session's claim (start it, or pass --admin URL)",
            admin.base()
        )),
    }
}

fn accepted(id: &str, keep_snapshot: bool) -> String {
    let snapshot = if keep_snapshot {
        "snapshot its workspace and keep the snapshot"
    } else {
        "delete every snapshot of it"
    };
    format!(
        "terminating {id:?}: Garrison will stop its remote and sandbox, {snapshot}, and release the claim.\n\
         Watch it with: garrison logs -f {id}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_says_what_happens_to_the_snapshot() {
        assert!(accepted("s", true).contains("keep the snapshot"));
        assert!(accepted("s", false).contains("delete every snapshot"));
    }
}
