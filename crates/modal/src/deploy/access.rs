//! Modal, as `garrison deploy modal` reaches it: the client, the
//! deployment's app and running sandbox, and
//! short helper commands in that sandbox (its serve state, its log).

use std::time::Duration;

use anyhow::bail;
use tonic::Code;

use super::plan::{self, Found};
use crate::exec::{self, Command, Finished};
use crate::{Client, ClientConfig, ModalEnv, RetryPolicy, wire};

/// Bounds a wait for a state change; never an expectation of speed.
pub(super) const TRANSITION_GUARD: Duration = Duration::from_secs(600);
/// The Modal environment the settings name (`MODAL_ENVIRONMENT`, else the
/// profile's `environment`); `""` is the account's default one.
pub(super) fn environment_of(modal: &ModalEnv) -> String {
    modal.environment.clone().unwrap_or_default()
}
/// Output kept from a helper command.
pub(super) const HELPER_OUTPUT: usize = 64 * 1024;
/// Bytes of log read per exec.
pub(super) const LOG_CHUNK: usize = 1024 * 1024;

/// A client with these settings.
pub(super) fn client_for(modal: &ModalEnv) -> anyhow::Result<Client> {
    Client::new(&ClientConfig {
        api_url: modal.api_url.clone(),
        credentials: modal.credentials.clone(),
        retry: RetryPolicy::default(),
    })
}

/// The deployment's app id; with `create`, made if missing, else `None`
/// when there is none.
pub(super) async fn app_id(
    client: &Client,
    environment: &str,
    name: &str,
    create: bool,
) -> anyhow::Result<Option<String>> {
    let creation = if create {
        wire::ObjectCreationType::CreateIfMissing
    } else {
        wire::ObjectCreationType::Unspecified
    };
    let request = wire::AppGetOrCreateRequest {
        app_name: name.to_owned(),
        environment_name: environment.to_owned(),
        object_creation_type: creation as i32,
    };
    match client
        .retrying("AppGetOrCreate", |mut rpc| {
            let request = request.clone();
            async move { rpc.app_get_or_create(request).await }
        })
        .await
    {
        Ok(r) => Ok(Some(r.app_id)),
        Err(s) if !create && s.code() == Code::NotFound => Ok(None),
        Err(s) => Err(anyhow::anyhow!(
            "looking up Modal app {name}: {}",
            s.message()
        )),
    }
}

/// The running sandboxes of the app.
pub(super) async fn running(
    client: &Client,
    environment: &str,
    app_id: &str,
) -> anyhow::Result<Vec<Found>> {
    let request = wire::SandboxListRequest {
        app_id: app_id.to_owned(),
        before_timestamp: 0.0,
        environment_name: environment.to_owned(),
        include_finished: false,
        tags: Vec::new(),
    };
    let page = client
        .retrying("SandboxList", |mut rpc| {
            let request = request.clone();
            async move { rpc.sandbox_list(request).await }
        })
        .await
        .map_err(|s| anyhow::anyhow!("listing Modal sandboxes: {}", s.message()))?;
    Ok(page
        .sandboxes
        .into_iter()
        .map(|s| Found {
            id: s.id,
            name: s.name,
            created_at: s.created_at,
            timeout_secs: s.timeout_secs,
        })
        .collect())
}

/// The running deployment sandbox, if any.
pub(super) async fn find(
    client: &Client,
    environment: &str,
    name: &str,
) -> anyhow::Result<Option<Found>> {
    let Some(app) = app_id(client, environment, name, false).await? else {
        return Ok(None);
    };
    Ok(plan::find(&running(client, environment, &app).await?, name).cloned())
}

/// The task of a running sandbox, waiting while it is scheduled; `None`
/// once it has ended.
pub(super) async fn task_id(client: &Client, sandbox_id: &str) -> anyhow::Result<Option<String>> {
    let deadline = tokio::time::Instant::now() + TRANSITION_GUARD;
    loop {
        let request = wire::SandboxGetTaskIdRequest {
            sandbox_id: sandbox_id.to_owned(),
            timeout: Some(55.0),
            wait_until_ready: false,
        };
        let response = match client
            .retrying("SandboxGetTaskId", |mut rpc| {
                let request = request.clone();
                async move { rpc.sandbox_get_task_id(request).await }
            })
            .await
        {
            Ok(r) => r,
            Err(s) if s.code() == Code::NotFound => return Ok(None),
            Err(s) => bail!("finding the task of sandbox {sandbox_id}: {}", s.message()),
        };
        if response.task_result.is_some() {
            return Ok(None);
        }
        if let Some(task) = response.task_id {
            return Ok(Some(task));
        }
        if tokio::time::Instant::now() > deadline {
            bail!("sandbox {sandbox_id} was not scheduled within {TRANSITION_GUARD:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Runs a short helper command in the sandbox's task to completion.
pub(super) async fn helper(
    client: &Client,
    task: &str,
    argv: Vec<String>,
    stdin: Option<&[u8]>,
    max: usize,
) -> anyhow::Result<Finished> {
    let what = argv.get(2).cloned().unwrap_or_default();
    exec::run(
        client,
        task,
        &Command {
            argv,
            workdir: None,
            env: Default::default(),
        },
        stdin,
        max,
    )
    .await
    .map_err(|s| {
        anyhow::anyhow!(
            "running {} in the sandbox: {}",
            what.lines().next().unwrap_or(""),
            s.message()
        )
    })
}

pub(super) fn sh(script: &str, args: &[&str]) -> Vec<String> {
    crate::scripts::sh(script, args.iter().map(|a| (*a).to_owned()))
}

/// `running`, `waiting` or `gone`, as [`plan::SERVE_STATE`] says.
pub(super) async fn serve_state(client: &Client, task: &str) -> anyhow::Result<String> {
    let done = helper(
        client,
        task,
        sh(plan::SERVE_STATE, &[]),
        None,
        HELPER_OUTPUT,
    )
    .await?;
    Ok(String::from_utf8_lossy(&done.output).trim().to_owned())
}

pub(super) async fn read_log(client: &Client, task: &str, offset: u64) -> anyhow::Result<Vec<u8>> {
    let done = helper(
        client,
        task,
        sh(
            plan::READ_LOG,
            &[&offset.to_string(), &LOG_CHUNK.to_string()],
        ),
        None,
        LOG_CHUNK,
    )
    .await?;
    if done.exit_code != 0 {
        bail!("reading the serve log failed ({})", done.exit_code);
    }
    Ok(done.output)
}

pub(super) fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

pub(super) async fn terminate_sandbox(client: &Client, sandbox_id: &str) -> anyhow::Result<()> {
    let request = wire::SandboxTerminateRequest {
        sandbox_id: sandbox_id.to_owned(),
    };
    match client
        .retrying("SandboxTerminate", |mut rpc| {
            let request = request.clone();
            async move { rpc.sandbox_terminate(request).await }
        })
        .await
    {
        Ok(_) => Ok(()),
        Err(s) if s.code() == Code::NotFound => Ok(()),
        Err(s) => bail!("terminating sandbox {sandbox_id}: {}", s.message()),
    }
}
