//! Modal Secrets: named sets of environment variables that Modal gives the
//! containers they are attached to (`Sandbox.secret_ids`).
//!
//! The calls are those of Modal's Python client 1.6.4
//! (`modal.Secret.objects.create`, `Secret.from_name`, `Secret.objects.delete`):
//! `SecretGetOrCreate` by name with an object creation type, then
//! `SecretDelete` by id. Values go to Modal and are never read back,
//! printed or logged here.

use std::collections::BTreeMap;

use tonic::{Code, Status};

use crate::client::Client;
use crate::wire;

/// Creates the Secret `name` with exactly `env`, or replaces the contents
/// of the one that exists (Modal's `CREATE_OVERWRITE_IF_EXISTS`). Returns
/// its id (`st-...`).
pub async fn put(
    client: &Client,
    name: &str,
    environment: &str,
    env: &BTreeMap<String, String>,
) -> Result<String, Status> {
    let request = wire::SecretGetOrCreateRequest {
        deployment_name: name.to_owned(),
        environment_name: environment.to_owned(),
        object_creation_type: wire::ObjectCreationType::CreateOverwriteIfExists as i32,
        env_dict: env.clone().into_iter().collect(),
        app_id: String::new(),
        required_keys: Vec::new(),
    };
    // Overwriting with the same contents is idempotent: safe to repeat.
    let response = client
        .retrying("SecretGetOrCreate", |mut rpc| {
            let request = request.clone();
            async move { rpc.secret_get_or_create(request).await }
        })
        .await?;
    Ok(response.secret_id)
}

/// The id of the Secret `name`, `None` when there is none (the lookup of
/// `Secret.from_name`).
pub async fn lookup(
    client: &Client,
    name: &str,
    environment: &str,
) -> Result<Option<String>, Status> {
    let request = wire::SecretGetOrCreateRequest {
        deployment_name: name.to_owned(),
        environment_name: environment.to_owned(),
        object_creation_type: wire::ObjectCreationType::Unspecified as i32,
        env_dict: Default::default(),
        app_id: String::new(),
        required_keys: Vec::new(),
    };
    match client
        .retrying("SecretGetOrCreate", |mut rpc| {
            let request = request.clone();
            async move { rpc.secret_get_or_create(request).await }
        })
        .await
    {
        Ok(response) => Ok(Some(response.secret_id)),
        Err(status) if status.code() == Code::NotFound => Ok(None),
        Err(status) => Err(status),
    }
}

/// Deletes the Secret `name`; `false` when there was none.
pub async fn delete(client: &Client, name: &str, environment: &str) -> Result<bool, Status> {
    let Some(secret_id) = lookup(client, name, environment).await? else {
        return Ok(false);
    };
    let request = wire::SecretDeleteRequest { secret_id };
    match client
        .retrying("SecretDelete", |mut rpc| {
            let request = request.clone();
            async move { rpc.secret_delete(request).await }
        })
        .await
    {
        Ok(_) => Ok(true),
        Err(status) if status.code() == Code::NotFound => Ok(false),
        Err(status) => Err(status),
    }
}
