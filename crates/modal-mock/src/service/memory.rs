//! Memory snapshots: taken on the command router (`TaskSnapshotMemory`),
//! looked up with `SandboxSnapshotGet`, restored with `SandboxRestoreV2`.
//!
//! A host cannot copy a running process tree, so the mock's snapshot moves
//! the sandbox's processes (stopped) and its directory into the snapshot:
//! the snapshotted sandbox ends (Garrison terminates it right after anyway),
//! and one restore brings them back, running, in a new sandbox. A second
//! restore of the same snapshot is refused.

use std::sync::Arc;
use std::time::Duration;

use modal::wire;
use nix::sys::signal::Signal;
use tonic::{Request, Response, Status};

use super::sandboxes::{end_with_entry_point, ensure_name_free};
use crate::ids::{new_id, unix_now};
use crate::state::{self, Frozen, MemorySnapshot, MockSandbox, State};

/// Takes a memory snapshot of the running sandbox of `task_id`; a repeated
/// `idempotency_key` answers with the snapshot the first request took.
pub(crate) fn take(state: &State, task_id: &str, idempotency_key: &str) -> Result<String, Status> {
    let key = format!("memory:{idempotency_key}");
    if !idempotency_key.is_empty()
        && let Some(id) = state.made(&key)
    {
        return Ok(id);
    }
    let snapshot_id = new_id("sn");
    let frozen_dir = state.config.root.join("memory").join(&snapshot_id);
    let (source, roots, entry, env) = {
        let mut inner = state.inner.lock().unwrap();
        let exec_ids: Vec<String> = {
            let sandbox_id = &inner
                .sandboxes
                .iter()
                .find(|s| s.task_id == task_id)
                .ok_or_else(|| Status::not_found(format!("task {task_id} not found")))?
                .view
                .id;
            inner
                .execs
                .iter()
                .filter(|(_, e)| e.sandbox_id == *sandbox_id)
                .map(|(id, _)| id.clone())
                .collect()
        };
        let sandbox = inner
            .sandboxes
            .iter_mut()
            .find(|s| s.task_id == task_id)
            .expect("found above");
        if sandbox.result.is_some() {
            return Err(Status::failed_precondition(format!(
                "task {task_id} has finished"
            )));
        }
        if !sandbox.view.definition.enable_snapshot {
            return Err(Status::failed_precondition(
                "memory snapshots need a sandbox created with enable_snapshot",
            ));
        }
        let mut roots = std::mem::take(&mut sandbox.pids);
        let entry = sandbox.entry.take();
        let env = std::mem::take(&mut sandbox.env);
        sandbox.result = Some(state::terminated());
        sandbox.view.running = false;
        let source = sandbox.view.clone();
        for id in exec_ids {
            if let Some(exec) = inner.execs.remove(&id) {
                roots.extend(exec.pid);
            }
        }
        (source, roots, entry, env)
    };
    // The processes that left their exec's group go into the snapshot too.
    let mut roots = roots;
    roots.extend(crate::exec::members(&source.id, &source.dir));
    state::signal_tree(&roots, Signal::SIGSTOP);
    std::fs::create_dir_all(frozen_dir.parent().expect("under the root"))
        .and_then(|()| std::fs::rename(&source.dir, &frozen_dir))
        .map_err(|e| Status::internal(format!("snapshot: {e}")))?;
    let mut inner = state.inner.lock().unwrap();
    inner.memory_snapshots.insert(
        snapshot_id.clone(),
        MemorySnapshot {
            source,
            frozen: Some(Frozen {
                dir: frozen_dir,
                pids: roots,
                entry,
                env,
            }),
        },
    );
    if !idempotency_key.is_empty() {
        inner.made.insert(key, snapshot_id.clone());
    }
    Ok(snapshot_id)
}

pub(super) async fn sandbox_snapshot_get(
    state: &Arc<State>,
    request: Request<wire::SandboxSnapshotGetRequest>,
) -> Result<Response<wire::SandboxSnapshotGetResponse>, Status> {
    state.enter("SandboxSnapshotGet")?;
    let r = request.into_inner();
    if !state
        .inner
        .lock()
        .unwrap()
        .memory_snapshots
        .contains_key(&r.snapshot_id)
    {
        return Err(Status::not_found(format!(
            "snapshot {} not found",
            r.snapshot_id
        )));
    }
    Ok(Response::new(wire::SandboxSnapshotGetResponse {
        snapshot_id: r.snapshot_id,
        handle_metadata: Some(wire::SandboxSnapshotHandleMetadata { is_v2: true }),
    }))
}

pub(super) async fn sandbox_restore_v2(
    state: &Arc<State>,
    request: Request<wire::SandboxRestoreV2Request>,
) -> Result<Response<wire::SandboxRestoreV2Response>, Status> {
    use wire::sandbox_restore_request::SandboxNameOverrideType as Override;
    state.enter("SandboxRestoreV2")?;
    let r = request.into_inner();
    let id = new_id("sb");
    let task_id = new_id("ta");
    let (mut view, frozen) = {
        let mut inner = state.inner.lock().unwrap();
        let snapshot = inner
            .memory_snapshots
            .get(&r.snapshot_id)
            .ok_or_else(|| Status::not_found(format!("snapshot {} not found", r.snapshot_id)))?;
        let mut view = snapshot.source.clone();
        view.name = match Override::try_from(r.sandbox_name_override_type) {
            Ok(Override::None) => None,
            Ok(Override::String) => Some(r.sandbox_name_override.clone()),
            _ => view.name,
        };
        if let Some(name) = &view.name {
            ensure_name_free(&inner, &view.app_id, name)?;
        }
        let frozen = inner
            .memory_snapshots
            .get_mut(&r.snapshot_id)
            .and_then(|s| s.frozen.take())
            .ok_or_else(|| {
                Status::failed_precondition(
                    "the mock restores a memory snapshot once (its processes move into the restored sandbox)",
                )
            })?;
        (view, frozen)
    };
    // Back where it was: a restored sandbox sees the same paths, as the
    // processes and the handle of the snapshotted one expect.
    let dir = view.dir.clone();
    std::fs::rename(&frozen.dir, &dir).map_err(|e| Status::internal(format!("restore: {e}")))?;
    state::signal_tree(&frozen.pids, Signal::SIGCONT);
    view.definition.name = view.name.clone();
    view.restored_from = Some(r.snapshot_id.clone());
    view.id = id.clone();
    view.dir = dir;
    view.running = true;
    let timeout = Duration::from_secs(u64::from(view.definition.timeout_secs.max(1)));
    let app_id = view.app_id.clone();
    state.inner.lock().unwrap().sandboxes.push(MockSandbox {
        view,
        created_at: unix_now(),
        task_id: task_id.clone(),
        result: None,
        pids: frozen.pids,
        entry: frozen.entry.clone(),
        env: frozen.env,
    });
    if let Some(entry) = frozen.entry {
        end_with_entry_point(state, &id, entry, timeout);
    }
    state.lose_answer("SandboxRestoreV2")?;
    Ok(Response::new(wire::SandboxRestoreV2Response {
        command_router_access: Some(wire::CommandRouterAccess {
            jwt: state.router_token(&task_id),
            url: state.router_url(),
        }),
        metadata: Some(wire::SandboxHandleMetadata {
            result: None,
            app_id,
        }),
        sandbox_id: id,
        task_id,
    }))
}
