//! The gRPC service: request validation and Modal's semantics on top of
//! [`crate::state`].

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use modal::wire::{self, generic_result::GenericStatus, modal_client_server::ModalClient};

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Request, Response, Status};

use crate::exec::{Exec, Fd};
use crate::state::{self, MockImage, MockSandbox, State, new_id, unix_now};

type Stream_<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// Most seconds one long-poll call waits, whatever the client asks.
const MAX_POLL: f32 = 55.0;
/// Sandboxes returned per `SandboxList` page.
const LIST_PAGE: usize = 100;

/// Checks Modal's credentials and client version on every call.
#[derive(Clone)]
pub struct Auth {
    token_id: String,
    token_secret: String,
}

impl Auth {
    pub fn new(state: &State) -> Self {
        Self {
            token_id: state.config.token_id.clone(),
            token_secret: state.config.token_secret.clone(),
        }
    }
}

impl tonic::service::Interceptor for Auth {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let header = |name: &str| {
            request
                .metadata()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let id = header(wire::HEADER_TOKEN_ID);
        let secret = header(wire::HEADER_TOKEN_SECRET);
        if id.as_deref() != Some(self.token_id.as_str())
            || secret.as_deref() != Some(self.token_secret.as_str())
        {
            return Err(Status::unauthenticated(
                "Token missing or invalid. Run `modal token new`.",
            ));
        }
        if header(wire::HEADER_CLIENT_VERSION).is_none_or(|v| v.is_empty()) {
            return Err(Status::failed_precondition(
                "x-modal-client-version is required",
            ));
        }
        Ok(request)
    }
}

pub struct Service {
    state: Arc<State>,
}

impl Service {
    pub fn new(state: Arc<State>) -> Self {
        Self { state }
    }

    fn exec(&self, exec_id: &str) -> Result<Arc<Exec>, Status> {
        self.state
            .inner
            .lock()
            .unwrap()
            .execs
            .get(exec_id)
            .cloned()
            .ok_or_else(|| Status::not_found(format!("exec {exec_id} not found")))
    }

    /// The running sandbox a task id belongs to.
    fn task_sandbox(&self, task_id: &str) -> Result<(String, std::path::PathBuf), Status> {
        let inner = self.state.inner.lock().unwrap();
        let sandbox = inner
            .sandboxes
            .iter()
            .find(|s| s.task_id == task_id)
            .ok_or_else(|| Status::not_found(format!("task {task_id} not found")))?;
        if sandbox.result.is_some() {
            return Err(Status::failed_precondition(format!(
                "task {task_id} has finished"
            )));
        }
        Ok((sandbox.view.id.clone(), sandbox.view.dir.clone()))
    }
}

fn poll_limit(timeout: f32) -> Duration {
    let secs = if timeout > 0.0 {
        timeout.min(MAX_POLL)
    } else {
        MAX_POLL
    };
    Duration::from_secs_f32(secs)
}

fn success() -> wire::GenericResult {
    wire::GenericResult {
        status: GenericStatus::Success as i32,
        exception: String::new(),
        exitcode: 0,
    }
}

mod sha2_free {
    //! A stable id for an image definition, so the same recipe gets the
    //! same image (Modal's `ImageGetOrCreate` is keyed by the recipe).
    pub fn digest(parts: &[String]) -> String {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        parts.hash(&mut h);
        format!("{:016x}", h.finish())
    }
}

#[tonic::async_trait]
impl ModalClient for Service {
    async fn app_get_or_create(
        &self,
        request: Request<wire::AppGetOrCreateRequest>,
    ) -> Result<Response<wire::AppGetOrCreateResponse>, Status> {
        self.state.enter("AppGetOrCreate")?;
        let r = request.into_inner();
        if r.app_name.is_empty() || r.app_name.len() > 64 {
            return Err(Status::invalid_argument("app names are 1 to 64 characters"));
        }
        let mut inner = self.state.inner.lock().unwrap();
        let creation = wire::ObjectCreationType::try_from(r.object_creation_type)
            .unwrap_or(wire::ObjectCreationType::Unspecified);
        let app_id = match (inner.apps.get(&r.app_name), creation) {
            (Some(id), wire::ObjectCreationType::CreateFailIfExists) => {
                return Err(Status::already_exists(format!(
                    "app {} exists ({id})",
                    r.app_name
                )));
            }
            (Some(id), _) => id.clone(),
            (None, wire::ObjectCreationType::Unspecified) => {
                return Err(Status::not_found(format!("app {} not found", r.app_name)));
            }
            (None, _) => {
                let id = new_id("ap");
                inner.apps.insert(r.app_name, id.clone());
                id
            }
        };
        Ok(Response::new(wire::AppGetOrCreateResponse { app_id }))
    }

    async fn sandbox_create(
        &self,
        request: Request<wire::SandboxCreateRequest>,
    ) -> Result<Response<wire::SandboxCreateResponse>, Status> {
        self.state.enter("SandboxCreate")?;
        let r = request.into_inner();
        let definition = r
            .definition
            .ok_or_else(|| Status::invalid_argument("definition is required"))?;
        let id = new_id("sb");
        let dir = self.state.sandbox_dir(&id);
        let snapshot_files = {
            let inner = self.state.inner.lock().unwrap();
            if !inner.apps.values().any(|a| *a == r.app_id) {
                return Err(Status::not_found(format!("app {} not found", r.app_id)));
            }
            let image = inner
                .images
                .get(&definition.image_id)
                .filter(|i| self.state.image_alive(i))
                .ok_or_else(|| {
                    Status::not_found(format!("image {} not found", definition.image_id))
                })?;
            if let Some(name) = &definition.name
                && inner.sandboxes.iter().any(|s| {
                    s.result.is_none()
                        && s.view.app_id == r.app_id
                        && s.view.name.as_ref() == Some(name)
                })
            {
                return Err(Status::already_exists(format!(
                    "a sandbox named {name} is running"
                )));
            }
            image.files.clone()
        };
        let prepared = match &snapshot_files {
            Some(files) => state::copy_tree(files, &dir),
            None => std::fs::create_dir_all(&dir),
        };
        prepared.map_err(|e| Status::internal(format!("preparing the sandbox: {e}")))?;
        let entry = Exec::start(&id, &definition.entrypoint_args, &dir, true);
        let timeout = Duration::from_secs(u64::from(definition.timeout_secs.max(1)));
        let mut sandbox = MockSandbox {
            view: state::SandboxView {
                id: id.clone(),
                app_id: r.app_id.clone(),
                name: definition.name.clone(),
                tags: r
                    .tags
                    .iter()
                    .map(|t| (t.tag_name.clone(), t.tag_value.clone()))
                    .collect(),
                definition,
                dir,
                running: true,
            },
            created_at: unix_now(),
            task_id: new_id("ta"),
            result: None,
            pids: entry.pid.into_iter().collect(),
        };
        if entry.pid.is_none() {
            sandbox.result = Some(wire::GenericResult {
                status: GenericStatus::InitFailure as i32,
                exception: "the entry point did not start".into(),
                exitcode: 127,
            });
            sandbox.view.running = false;
        }
        self.state.inner.lock().unwrap().sandboxes.push(sandbox);
        // The sandbox ends with its entry point, or at its timeout.
        let state = self.state.clone();
        let sandbox_id = id.clone();
        tokio::spawn(async move {
            let mut changed = entry.subscribe();
            let ended = tokio::time::timeout(timeout, async {
                while entry.exit_code().is_none() {
                    if changed.changed().await.is_err() {
                        break;
                    }
                }
            })
            .await;
            let result = match (ended, entry.exit_code()) {
                (Err(_), _) => wire::GenericResult {
                    status: GenericStatus::Timeout as i32,
                    exception: "sandbox timed out".into(),
                    exitcode: 0,
                },
                (Ok(()), Some(0)) => success(),
                (Ok(()), code) => wire::GenericResult {
                    status: GenericStatus::Failure as i32,
                    exception: String::new(),
                    exitcode: code.unwrap_or(255),
                },
            };
            state.finish(&sandbox_id, result);
        });
        Ok(Response::new(wire::SandboxCreateResponse {
            sandbox_id: id,
        }))
    }

    async fn sandbox_get_task_id(
        &self,
        request: Request<wire::SandboxGetTaskIdRequest>,
    ) -> Result<Response<wire::SandboxGetTaskIdResponse>, Status> {
        self.state.enter("SandboxGetTaskId")?;
        let r = request.into_inner();
        let inner = self.state.inner.lock().unwrap();
        let sandbox = inner
            .sandboxes
            .iter()
            .find(|s| s.view.id == r.sandbox_id)
            .ok_or_else(|| Status::not_found(format!("sandbox {} not found", r.sandbox_id)))?;
        Ok(Response::new(match &sandbox.result {
            Some(result) => wire::SandboxGetTaskIdResponse {
                task_id: None,
                task_result: Some(result.clone()),
            },
            None => wire::SandboxGetTaskIdResponse {
                task_id: Some(sandbox.task_id.clone()),
                task_result: None,
            },
        }))
    }

    async fn sandbox_tags_set(
        &self,
        request: Request<wire::SandboxTagsSetRequest>,
    ) -> Result<Response<()>, Status> {
        self.state.enter("SandboxTagsSet")?;
        let r = request.into_inner();
        let mut inner = self.state.inner.lock().unwrap();
        let sandbox = inner
            .sandboxes
            .iter_mut()
            .find(|s| s.view.id == r.sandbox_id)
            .ok_or_else(|| Status::not_found(format!("sandbox {} not found", r.sandbox_id)))?;
        sandbox.view.tags = r
            .tags
            .into_iter()
            .map(|t| (t.tag_name, t.tag_value))
            .collect();
        Ok(Response::new(()))
    }

    async fn sandbox_terminate(
        &self,
        request: Request<wire::SandboxTerminateRequest>,
    ) -> Result<Response<wire::SandboxTerminateResponse>, Status> {
        self.state.enter("SandboxTerminate")?;
        let r = request.into_inner();
        if self.state.sandbox_view(&r.sandbox_id).is_none() {
            return Err(Status::not_found(format!(
                "sandbox {} not found",
                r.sandbox_id
            )));
        }
        let existing_result = self.state.finish(&r.sandbox_id, state::terminated());
        Ok(Response::new(wire::SandboxTerminateResponse {
            existing_result,
        }))
    }

    async fn sandbox_wait(
        &self,
        request: Request<wire::SandboxWaitRequest>,
    ) -> Result<Response<wire::SandboxWaitResponse>, Status> {
        self.state.enter("SandboxWait")?;
        let r = request.into_inner();
        let deadline = tokio::time::Instant::now() + poll_limit(r.timeout);
        loop {
            let result = {
                let inner = self.state.inner.lock().unwrap();
                let sandbox = inner
                    .sandboxes
                    .iter()
                    .find(|s| s.view.id == r.sandbox_id)
                    .ok_or_else(|| {
                        Status::not_found(format!("sandbox {} not found", r.sandbox_id))
                    })?;
                sandbox.result.clone()
            };
            if result.is_some() || tokio::time::Instant::now() >= deadline {
                return Ok(Response::new(wire::SandboxWaitResponse { result }));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn sandbox_list(
        &self,
        request: Request<wire::SandboxListRequest>,
    ) -> Result<Response<wire::SandboxListResponse>, Status> {
        self.state.enter("SandboxList")?;
        let r = request.into_inner();
        let inner = self.state.inner.lock().unwrap();
        let mut found: Vec<&MockSandbox> = inner
            .sandboxes
            .iter()
            .filter(|s| r.app_id.is_empty() || s.view.app_id == r.app_id)
            .filter(|s| r.include_finished || s.result.is_none())
            .filter(|s| r.before_timestamp == 0.0 || s.created_at < r.before_timestamp)
            .filter(|s| {
                r.tags.iter().all(|t| {
                    s.view
                        .tags
                        .iter()
                        .any(|(k, v)| *k == t.tag_name && *v == t.tag_value)
                })
            })
            .collect();
        found.sort_by(|a, b| b.created_at.total_cmp(&a.created_at));
        found.truncate(LIST_PAGE);
        let sandboxes = found
            .into_iter()
            .map(|s| wire::SandboxInfo {
                id: s.view.id.clone(),
                created_at: s.created_at,
                app_id: s.view.app_id.clone(),
                tags: s
                    .view
                    .tags
                    .iter()
                    .map(|(k, v)| wire::SandboxTag {
                        tag_name: k.clone(),
                        tag_value: v.clone(),
                    })
                    .collect(),
                name: s.view.name.clone().unwrap_or_default(),
                image_id: s.view.definition.image_id.clone(),
                regions: s
                    .view
                    .definition
                    .scheduler_placement
                    .as_ref()
                    .map(|p| p.regions.clone())
                    .unwrap_or_default(),
                timeout_secs: s.view.definition.timeout_secs,
            })
            .collect();
        Ok(Response::new(wire::SandboxListResponse { sandboxes }))
    }

    async fn sandbox_snapshot_fs(
        &self,
        request: Request<wire::SandboxSnapshotFsRequest>,
    ) -> Result<Response<wire::SandboxSnapshotFsResponse>, Status> {
        self.state.enter("SandboxSnapshotFs")?;
        let r = request.into_inner();
        let view = self
            .state
            .sandbox_view(&r.sandbox_id)
            .ok_or_else(|| Status::not_found(format!("sandbox {} not found", r.sandbox_id)))?;
        if !view.running {
            return Err(Status::failed_precondition("the sandbox has finished"));
        }
        let image_id = new_id("im");
        let files = self.state.image_dir(&image_id);
        let (from, to) = (view.dir.clone(), files.clone());
        tokio::task::spawn_blocking(move || state::copy_tree(&from, &to))
            .await
            .map_err(|e| Status::internal(e.to_string()))?
            .map_err(|e| Status::internal(format!("snapshot: {e}")))?;
        let created = self.state.now();
        self.state.inner.lock().unwrap().images.insert(
            image_id.clone(),
            MockImage {
                view: state::ImageView {
                    id: image_id.clone(),
                    dockerfile_commands: Vec::new(),
                    base_images: vec![view.definition.image_id.clone()],
                    builder_version: String::new(),
                    snapshot_of: Some(view.id.clone()),
                },
                created,
                files: Some(files),
            },
        );
        Ok(Response::new(wire::SandboxSnapshotFsResponse {
            image_id,
            result: Some(success()),
        }))
    }

    async fn container_exec(
        &self,
        request: Request<wire::ContainerExecRequest>,
    ) -> Result<Response<wire::ContainerExecResponse>, Status> {
        self.state.enter("ContainerExec")?;
        let r = request.into_inner();
        if r.command.is_empty() {
            return Err(Status::invalid_argument("command is empty"));
        }
        let (sandbox_id, dir) = self.task_sandbox(&r.task_id)?;
        let cwd = r.workdir.map(std::path::PathBuf::from).unwrap_or(dir);
        let merge = r.stderr_output == wire::ExecOutputOption::Stdout as i32;
        let exec = Exec::start(&sandbox_id, &r.command, &cwd, merge);
        let exec_id = new_id("ce");
        self.state
            .inner
            .lock()
            .unwrap()
            .execs
            .insert(exec_id.clone(), exec);
        Ok(Response::new(wire::ContainerExecResponse { exec_id }))
    }

    type ContainerExecGetOutputStream = Stream_<wire::RuntimeOutputBatch>;

    async fn container_exec_get_output(
        &self,
        request: Request<wire::ContainerExecGetOutputRequest>,
    ) -> Result<Response<Self::ContainerExecGetOutputStream>, Status> {
        self.state.enter("ContainerExecGetOutput")?;
        let r = request.into_inner();
        let exec = self.exec(&r.exec_id)?;
        let fd = match wire::FileDescriptor::try_from(r.file_descriptor) {
            Ok(wire::FileDescriptor::Stderr) => Fd::Stderr,
            Ok(wire::FileDescriptor::Stdout) => Fd::Stdout,
            _ => {
                return Err(Status::invalid_argument(
                    "file_descriptor must be stdout or stderr",
                ));
            }
        };
        let limit = poll_limit(r.timeout);
        let (tx, rx) = mpsc::channel(16);
        tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + limit;
            let mut last = r.last_batch_index;
            let mut changed = exec.subscribe();
            loop {
                changed.borrow_and_update();
                let batches = exec.batches_after(fd, last);
                for (index, bytes) in batches.items {
                    last = index;
                    let message = wire::RuntimeOutputMessage {
                        file_descriptor: r.file_descriptor,
                        message: if r.get_raw_bytes {
                            String::new()
                        } else {
                            String::from_utf8_lossy(&bytes).into_owned()
                        },
                        message_bytes: if r.get_raw_bytes { bytes } else { Vec::new() },
                    };
                    let batch = wire::RuntimeOutputBatch {
                        items: vec![message],
                        batch_index: index,
                        exit_code: None,
                    };
                    if tx.send(Ok(batch)).await.is_err() {
                        return;
                    }
                }
                if let Some(code) = batches.exit {
                    let _ = tx
                        .send(Ok(wire::RuntimeOutputBatch {
                            items: Vec::new(),
                            batch_index: batches.total + 1,
                            exit_code: Some(code),
                        }))
                        .await;
                    return;
                }
                if tokio::time::timeout_at(deadline, changed.changed())
                    .await
                    .is_err()
                {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn container_exec_put_input(
        &self,
        request: Request<wire::ContainerExecPutInputRequest>,
    ) -> Result<Response<()>, Status> {
        self.state.enter("ContainerExecPutInput")?;
        let r = request.into_inner();
        let exec = self.exec(&r.exec_id)?;
        let input = r
            .input
            .ok_or_else(|| Status::invalid_argument("input is required"))?;
        if input.message_index == 0 {
            return Err(Status::invalid_argument("message_index starts at 1"));
        }
        exec.put_input(input.message_index, input.message, input.eof)
            .await;
        Ok(Response::new(()))
    }

    async fn container_exec_wait(
        &self,
        request: Request<wire::ContainerExecWaitRequest>,
    ) -> Result<Response<wire::ContainerExecWaitResponse>, Status> {
        self.state.enter("ContainerExecWait")?;
        let r = request.into_inner();
        let exec = self.exec(&r.exec_id)?;
        let mut changed = exec.subscribe();
        let deadline = tokio::time::Instant::now() + poll_limit(r.timeout);
        loop {
            changed.borrow_and_update();
            if let Some(code) = exec.exit_code() {
                return Ok(Response::new(wire::ContainerExecWaitResponse {
                    exit_code: Some(code),
                    completed: true,
                }));
            }
            if tokio::time::timeout_at(deadline, changed.changed())
                .await
                .is_err()
            {
                return Ok(Response::new(wire::ContainerExecWaitResponse {
                    exit_code: None,
                    completed: false,
                }));
            }
        }
    }

    async fn image_get_or_create(
        &self,
        request: Request<wire::ImageGetOrCreateRequest>,
    ) -> Result<Response<wire::ImageGetOrCreateResponse>, Status> {
        self.state.enter("ImageGetOrCreate")?;
        let r = request.into_inner();
        let image = r
            .image
            .ok_or_else(|| Status::invalid_argument("image is required"))?;
        let first = image
            .dockerfile_commands
            .first()
            .map(|c| c.trim().to_ascii_uppercase());
        if !first.is_some_and(|c| c.starts_with("FROM ")) {
            return Err(Status::invalid_argument(
                "the first Dockerfile command must be FROM",
            ));
        }
        let mut inner = self.state.inner.lock().unwrap();
        if !inner.apps.values().any(|a| *a == r.app_id) {
            return Err(Status::not_found(format!("app {} not found", r.app_id)));
        }
        let bases: Vec<String> = image
            .base_images
            .iter()
            .map(|b| b.image_id.clone())
            .collect();
        for base in &bases {
            if !inner.images.contains_key(base) {
                return Err(Status::not_found(format!("base image {base} not found")));
            }
        }
        let mut key = image.dockerfile_commands.clone();
        key.extend(bases.iter().cloned());
        key.push(r.builder_version.clone());
        let mut image_id = format!("im-{}", sha2_free::digest(&key));
        if r.force_build {
            image_id = new_id("im");
        }
        inner
            .images
            .entry(image_id.clone())
            .or_insert_with(|| MockImage {
                view: state::ImageView {
                    id: image_id.clone(),
                    dockerfile_commands: image.dockerfile_commands,
                    base_images: bases,
                    builder_version: r.builder_version,
                    snapshot_of: None,
                },
                created: self.state.now(),
                files: None,
            });
        // The result is left for ImageJoinStreaming, as for a fresh build.
        Ok(Response::new(wire::ImageGetOrCreateResponse {
            image_id,
            result: None,
        }))
    }

    type ImageJoinStreamingStream = Stream_<wire::ImageJoinStreamingResponse>;

    async fn image_join_streaming(
        &self,
        request: Request<wire::ImageJoinStreamingRequest>,
    ) -> Result<Response<Self::ImageJoinStreamingStream>, Status> {
        self.state.enter("ImageJoinStreaming")?;
        let r = request.into_inner();
        let view = self
            .state
            .image_view(&r.image_id)
            .ok_or_else(|| Status::not_found(format!("image {} not found", r.image_id)))?;
        let mut items: Vec<Result<wire::ImageJoinStreamingResponse, Status>> = view
            .dockerfile_commands
            .iter()
            .enumerate()
            .map(|(i, command)| {
                Ok(wire::ImageJoinStreamingResponse {
                    result: None,
                    task_logs: vec![wire::TaskLogs {
                        data: format!("Step {}: {command}\n", i + 1),
                        file_descriptor: wire::FileDescriptor::Stdout as i32,
                    }],
                    entry_id: format!("{}-0", i + 1),
                    eof: false,
                })
            })
            .collect();
        let skip = r
            .last_entry_id
            .split('-')
            .next()
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or(0);
        items.drain(..skip.min(items.len()));
        items.push(Ok(wire::ImageJoinStreamingResponse {
            result: Some(success()),
            task_logs: Vec::new(),
            entry_id: String::new(),
            eof: true,
        }));
        Ok(Response::new(Box::pin(tokio_stream::iter(items))))
    }

    async fn image_from_id(
        &self,
        request: Request<wire::ImageFromIdRequest>,
    ) -> Result<Response<wire::ImageFromIdResponse>, Status> {
        self.state.enter("ImageFromId")?;
        let r = request.into_inner();
        let inner = self.state.inner.lock().unwrap();
        match inner.images.get(&r.image_id) {
            Some(image) if self.state.image_alive(image) => {
                Ok(Response::new(wire::ImageFromIdResponse {
                    image_id: r.image_id,
                }))
            }
            _ => Err(Status::not_found(format!("image {} not found", r.image_id))),
        }
    }

    async fn image_delete(
        &self,
        request: Request<wire::ImageDeleteRequest>,
    ) -> Result<Response<()>, Status> {
        self.state.enter("ImageDelete")?;
        let r = request.into_inner();
        let removed = {
            let mut inner = self.state.inner.lock().unwrap();
            match inner.images.get(&r.image_id) {
                Some(image) if self.state.image_alive(image) => inner.images.remove(&r.image_id),
                _ => None,
            }
        };
        let image = removed.ok_or_else(|| {
            Status::new(Code::NotFound, format!("image {} not found", r.image_id))
        })?;
        if let Some(files) = image.files {
            let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(files)).await;
        }
        Ok(Response::new(()))
    }
}
