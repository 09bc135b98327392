//! What a session would otherwise leave behind on this host: a sandbox the
//! backend has but the session's record does not (a create whose record
//! failed, or a Garrison killed between the two), the remains of a create
//! killed part way, and the snapshots of a session this host lost the
//! claim on but that ended elsewhere. Functions of a [`StepCtx`].

use fleet::{FleetClient, SessionId, SessionStatus};
use sandbox::{Handle, SandboxName};
use serde_json::json;
use tracing::{info, warn};

use super::deps::Deps;
use super::snapshots::delete_snapshots_once;
use super::step::StepCtx;
use crate::planner::{FinishNote, lost_session_note};

/// The session's sandbox on this backend that its record does not name:
/// found by its deterministic name, and only if this Garrison made it (a
/// cloud account may hold another Garrison's sandbox of the same name).
pub(super) async fn find_unrecorded_sandbox(ctx: &StepCtx, acceptor_id: &str) -> Option<Handle> {
    let name = SandboxName::for_session(ctx.session_id.as_str());
    match ctx.backend.find(&name).await {
        Ok(Some(handle))
            if handle
                .labels
                .get(sandbox::LABEL_ACCEPTOR_ID)
                .is_none_or(|a| a == acceptor_id) =>
        {
            Some(handle)
        }
        Ok(_) => None,
        Err(e) => {
            warn!(session_id = ctx.id(), error = %e, "looking for an unrecorded sandbox failed");
            None
        }
    }
}

/// Destroys a sandbox the session's record does not name. No remote ran in
/// it (a remote is recorded before it is spawned), so it holds no work:
/// kept, nothing would ever lead back to it.
pub(super) async fn destroy_unrecorded(ctx: &StepCtx, handle: &Handle) {
    match ctx.backend.destroy(handle).await {
        Ok(()) => {
            info!(
                session_id = ctx.id(),
                sandbox = handle.name,
                "destroyed a sandbox the session's record did not name"
            );
            ctx.event(
                "unrecorded_sandbox_destroyed",
                json!({ "sandbox": handle.name }),
            );
        }
        Err(e) => {
            warn!(session_id = ctx.id(), sandbox = handle.name, error = %e, "destroying an unrecorded sandbox failed; the orphan sweep tries again")
        }
    }
}

/// Removes what an interrupted create of the session's sandbox left (see
/// [`Sandbox::remove_remains`](sandbox::Sandbox::remove_remains)).
pub(super) async fn remove_remains(ctx: &StepCtx) {
    let name = SandboxName::for_session(ctx.session_id.as_str());
    match ctx.backend.remove_remains(&name).await {
        Ok(false) => {}
        Ok(true) => {
            info!(
                session_id = ctx.id(),
                sandbox = name.as_str(),
                "removed the remains of an interrupted create"
            );
            ctx.event("remains_removed", json!({ "sandbox": name.as_str() }));
        }
        Err(e) => {
            warn!(session_id = ctx.id(), sandbox = name.as_str(), error = %e, "removing the remains of an interrupted create failed")
        }
    }
}

/// The event each "is it over?" question is recorded in, with its
/// `status` (the answer) and `over`.
pub(crate) const ASKED_IF_OVER: &str = "asked_if_over";

/// The `status` of an `asked_if_over` event whose question went
/// unanswered (the host was cut off from the fleet API when it asked).
pub(crate) const UNANSWERED: &str = "unknown";

/// The `status` of an `asked_if_over` event whose question found no such
/// session: its final status will never be read, and its recovery
/// snapshot is kept for the retention period.
pub(crate) const GONE: &str = "gone";

/// For the minute's sweep: asks again whether session `session_id`, which
/// this host lost and whose last question had no final answer, is over,
/// and deletes its snapshots if it is. Without it, a host cut off from the
/// fleet API when it lost the session kept its late recovery snapshot for
/// the whole retention period, though the session had ended elsewhere
/// (the host that ended it could not delete a snapshot not yet written);
/// and a session still running when asked, its last words from this
/// host's own stopped remote still on their way (a cut healed, TCP
/// retransmitting), ended with no host serving it to delete anything.
/// `true` once the snapshots went.
pub(crate) async fn ask_again_if_over(deps: &Deps, session_id: SessionId) -> bool {
    let ctx = StepCtx::new(deps, session_id);
    asked_if_over(&ctx, &deps.client).await && delete_snapshots_once(&ctx).await
}

/// Asks the fleet API whether a session this host lost (its claim lapsed or
/// went to another acceptor) is over: `true` only when it says the session
/// is terminated. Then its snapshots and sandbox can go now instead of
/// waiting out the retention period; any other answer (or none) keeps them.
pub(super) async fn asked_if_over(ctx: &StepCtx, client: &FleetClient) -> bool {
    let answer = client.get(&ctx.session_id).await;
    let status = match &answer {
        Ok(Some(entry)) => entry.status.session_status.to_string(),
        Ok(None) => GONE.to_owned(),
        Err(_) => UNANSWERED.to_owned(),
    };
    let over = matches!(&answer, Ok(Some(entry)) if entry.status.session_status == SessionStatus::Terminated);
    ctx.event(ASKED_IF_OVER, json!({ "status": status, "over": over }));
    // Its recovery snapshot is kept for the retention period then; whoever
    // finds it finds why.
    let noted = || {
        ctx.store
            .events(&ctx.session_id, 0)
            .unwrap_or_default()
            .iter()
            .any(|e| e.kind == FinishNote::GoneAfterTheClaimWasLost.kind())
    };
    let gone = matches!(answer, Ok(None));
    if let Some(note) = lost_session_note(gone, gone && noted()) {
        warn!(
            session_id = ctx.id(),
            reason = note.reason(),
            "the final status of the session cannot be read"
        );
        ctx.event(note.kind(), json!({ "reason": note.reason() }));
    }
    if over {
        info!(
            session_id = ctx.id(),
            "the session this host lost is terminated; its snapshots and sandbox go now"
        );
    }
    over
}
