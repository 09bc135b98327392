//! Modal Secrets: named (or anonymous) sets of environment variables, kept
//! in memory, and the environment a sandbox gets from the Secrets it is
//! created with.
//!
//! As Modal's API does: `SecretGetOrCreate` looks a named Secret up (no
//! creation type), creates it if missing, fails if it exists, or overwrites
//! it, and makes anonymous Secrets from a dict (`Secret.from_dict`);
//! `SecretGetInfo` and `SecretList` give names and keys, never values;
//! `SecretUpdate` merges; `SecretDelete` removes. Values are never logged,
//! printed or written to disk here.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use modal::wire;
use tonic::Status;

use crate::ids::{new_id, unix_now};

/// Most variables one Secret holds, and most bytes of all its names and
/// values together (bounds the mock's memory, not Modal's published limit).
const MAX_KEYS: usize = 1000;
const MAX_BYTES: usize = 1024 * 1024;

struct Secret {
    id: String,
    /// `None` for an anonymous Secret (`Secret.from_dict`).
    name: Option<String>,
    environment: String,
    env: BTreeMap<String, String>,
    created_at: f64,
}

impl Secret {
    fn metadata(&self) -> wire::SecretMetadata {
        wire::SecretMetadata {
            name: self.name.clone().unwrap_or_default(),
            creation_info: Some(wire::CreationInfo {
                created_at: self.created_at,
                created_by: "mock".to_owned(),
            }),
            keys: self.env.keys().cloned().collect(),
            environment_name: self.environment.clone(),
            last_used_at: 0.0,
            template_type: String::new(),
        }
    }
}

/// Every Secret of the mock, by id.
#[derive(Default)]
pub(crate) struct Secrets {
    by_id: Mutex<HashMap<String, Secret>>,
}

/// Modal's object names: letters, digits, `-`, `_`, `.`; at most 64.
fn check_name(name: &str) -> Result<(), Status> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(Status::invalid_argument(format!(
            "invalid Secret name {name:?}: letters, digits, '-', '_' and '.', at most 64"
        )))
    }
}

/// Variable names as a shell takes them; sizes bounded.
fn check_env<'a>(env: impl IntoIterator<Item = (&'a String, &'a String)>) -> Result<(), Status> {
    let (mut keys, mut bytes) = (0usize, 0usize);
    for (key, value) in env {
        let valid = key
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !valid || value.contains('\0') {
            // The key may be shown; a value never is.
            return Err(Status::invalid_argument(format!(
                "invalid Secret variable {key:?}"
            )));
        }
        keys += 1;
        bytes += key.len() + value.len();
    }
    if keys > MAX_KEYS || bytes > MAX_BYTES {
        return Err(Status::invalid_argument("the Secret is too large"));
    }
    Ok(())
}

fn is_named(s: &Secret, name: &str, environment: &str) -> bool {
    s.name.as_deref() == Some(name) && s.environment == environment
}

impl Secrets {
    pub(crate) fn get_or_create(
        &self,
        r: wire::SecretGetOrCreateRequest,
    ) -> Result<wire::SecretGetOrCreateResponse, Status> {
        use wire::ObjectCreationType as Creation;
        let creation = Creation::try_from(r.object_creation_type)
            .map_err(|_| Status::invalid_argument("unknown object_creation_type"))?;
        check_env(&r.env_dict)?;
        let mut all = self.by_id.lock().unwrap();
        if r.deployment_name.is_empty() {
            if !matches!(
                creation,
                Creation::Ephemeral | Creation::AnonymousOwnedByApp
            ) {
                return Err(Status::invalid_argument(
                    "a Secret without a name must be ephemeral or owned by an app",
                ));
            }
            let secret = Secret {
                id: new_id("st"),
                name: None,
                environment: r.environment_name,
                env: r.env_dict.into_iter().collect(),
                created_at: unix_now(),
            };
            let response = respond(&secret);
            all.insert(secret.id.clone(), secret);
            return Ok(response);
        }
        check_name(&r.deployment_name)?;
        let existing = all
            .values_mut()
            .find(|s| is_named(s, &r.deployment_name, &r.environment_name));
        match (existing, creation) {
            (Some(s), Creation::CreateFailIfExists) => Err(Status::already_exists(format!(
                "Secret {} already exists",
                s.name.as_deref().unwrap_or_default()
            ))),
            (Some(s), Creation::CreateOverwriteIfExists) => {
                s.env = r.env_dict.into_iter().collect();
                Ok(respond(s))
            }
            (Some(s), Creation::Unspecified | Creation::CreateIfMissing) => {
                let missing: Vec<&String> = r
                    .required_keys
                    .iter()
                    .filter(|k| !s.env.contains_key(*k))
                    .collect();
                if !missing.is_empty() {
                    return Err(Status::not_found(format!(
                        "Secret {} is missing the keys {missing:?}",
                        r.deployment_name
                    )));
                }
                Ok(respond(s))
            }
            (None, Creation::Unspecified) => Err(Status::not_found(format!(
                "Secret {} not found",
                r.deployment_name
            ))),
            (
                None,
                Creation::CreateIfMissing
                | Creation::CreateFailIfExists
                | Creation::CreateOverwriteIfExists,
            ) => {
                let secret = Secret {
                    id: new_id("st"),
                    name: Some(r.deployment_name),
                    environment: r.environment_name,
                    env: r.env_dict.into_iter().collect(),
                    created_at: unix_now(),
                };
                let response = respond(&secret);
                all.insert(secret.id.clone(), secret);
                Ok(response)
            }
            (_, _) => Err(Status::invalid_argument(
                "a named Secret cannot be ephemeral or owned by an app",
            )),
        }
    }

    pub(crate) fn get_info(
        &self,
        r: wire::SecretGetInfoRequest,
    ) -> Result<wire::SecretGetInfoResponse, Status> {
        let all = self.by_id.lock().unwrap();
        let secret = all
            .get(&r.secret_id)
            .ok_or_else(|| not_found(&r.secret_id))?;
        Ok(wire::SecretGetInfoResponse {
            metadata: Some(secret.metadata()),
        })
    }

    pub(crate) fn update(&self, r: wire::SecretUpdateRequest) -> Result<(), Status> {
        let mut all = self.by_id.lock().unwrap();
        let secret = all
            .get_mut(&r.secret_id)
            .ok_or_else(|| not_found(&r.secret_id))?;
        let mut env = secret.env.clone();
        for update in r.updates {
            match update.value {
                Some(value) => env.insert(update.key, value),
                None => env.remove(&update.key),
            };
        }
        check_env(&env)?;
        secret.env = env;
        Ok(())
    }

    pub(crate) fn delete(&self, r: wire::SecretDeleteRequest) -> Result<(), Status> {
        self.by_id
            .lock()
            .unwrap()
            .remove(&r.secret_id)
            .map(|_| ())
            .ok_or_else(|| not_found(&r.secret_id))
    }

    /// Named Secrets of the environment, newest first, a page at a time.
    pub(crate) fn list(&self, r: wire::SecretListRequest) -> wire::SecretListResponse {
        let all = self.by_id.lock().unwrap();
        let (max, before) = r
            .pagination
            .map_or((0, 0.0), |p| (p.max_objects, p.created_before));
        let mut named: Vec<&Secret> = all
            .values()
            .filter(|s| s.name.is_some() && s.environment == r.environment_name)
            .filter(|s| before <= 0.0 || s.created_at < before)
            .collect();
        named.sort_by(|a, b| b.created_at.total_cmp(&a.created_at));
        if max > 0 {
            named.truncate(max as usize);
        }
        wire::SecretListResponse {
            items: named
                .into_iter()
                .map(|s| wire::SecretListItem {
                    label: s.name.clone().unwrap_or_default(),
                    created_at: s.created_at,
                    last_used_at: 0.0,
                    environment_name: s.environment.clone(),
                    secret_id: s.id.clone(),
                    metadata: Some(s.metadata()),
                })
                .collect(),
            environment_name: r.environment_name,
        }
    }

    /// The environment a container gets from `secret_ids` and inline
    /// `sources`, later ones winning; `NOT_FOUND` for an unknown id.
    pub(crate) fn env_for(
        &self,
        secret_ids: &[String],
        sources: &[wire::SecretSource],
    ) -> Result<BTreeMap<String, String>, Status> {
        let all = self.by_id.lock().unwrap();
        let mut env = BTreeMap::new();
        let add_id = |id: &str, env: &mut BTreeMap<String, String>| {
            let secret = all.get(id).ok_or_else(|| not_found(id))?;
            env.extend(secret.env.clone());
            Ok::<_, Status>(())
        };
        for id in secret_ids {
            add_id(id, &mut env)?;
        }
        for source in sources {
            match &source.source {
                Some(wire::secret_source::Source::SecretId(id)) => add_id(id, &mut env)?,
                Some(wire::secret_source::Source::Env(map)) => {
                    check_env(&map.contents)?;
                    env.extend(map.contents.clone());
                }
                None => {}
            }
        }
        Ok(env)
    }

    /// The names of the named Secrets (for tests; never values).
    pub(crate) fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .by_id
            .lock()
            .unwrap()
            .values()
            .filter_map(|s| s.name.clone())
            .collect();
        names.sort();
        names
    }

    /// `environment/name` of each named Secret, sorted.
    pub(crate) fn qualified_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .by_id
            .lock()
            .unwrap()
            .values()
            .filter_map(|s| Some(format!("{}/{}", s.environment, s.name.as_ref()?)))
            .collect();
        names.sort();
        names
    }
}

fn respond(secret: &Secret) -> wire::SecretGetOrCreateResponse {
    wire::SecretGetOrCreateResponse {
        secret_id: secret.id.clone(),
        metadata: Some(secret.metadata()),
    }
}

fn not_found(id: &str) -> Status {
    Status::not_found(format!("Secret {id} not found"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(
        name: &str,
        creation: wire::ObjectCreationType,
        env: &[(&str, &str)],
    ) -> wire::SecretGetOrCreateRequest {
        wire::SecretGetOrCreateRequest {
            deployment_name: name.to_owned(),
            environment_name: String::new(),
            object_creation_type: creation as i32,
            env_dict: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            app_id: String::new(),
            required_keys: Vec::new(),
        }
    }

    #[test]
    fn named_secrets_follow_the_creation_types() {
        use wire::ObjectCreationType as C;
        let secrets = Secrets::default();
        let lookup = request("s", C::Unspecified, &[]);
        assert_eq!(
            secrets.get_or_create(lookup.clone()).unwrap_err().code(),
            tonic::Code::NotFound
        );
        let made = secrets
            .get_or_create(request("s", C::CreateFailIfExists, &[("A", "1")]))
            .unwrap();
        assert_eq!(
            secrets
                .get_or_create(request("s", C::CreateFailIfExists, &[("A", "2")]))
                .unwrap_err()
                .code(),
            tonic::Code::AlreadyExists
        );
        // Kept as it was when it exists.
        let kept = secrets
            .get_or_create(request("s", C::CreateIfMissing, &[("B", "2")]))
            .unwrap();
        assert_eq!(kept.secret_id, made.secret_id);
        assert_eq!(
            secrets
                .env_for(std::slice::from_ref(&made.secret_id), &[])
                .unwrap()["A"],
            "1"
        );
        // Replaced, same id.
        let over = secrets
            .get_or_create(request("s", C::CreateOverwriteIfExists, &[("B", "3")]))
            .unwrap();
        assert_eq!(over.secret_id, made.secret_id);
        let env = secrets
            .env_for(std::slice::from_ref(&made.secret_id), &[])
            .unwrap();
        assert_eq!(env, BTreeMap::from([("B".to_owned(), "3".to_owned())]));
        assert_eq!(over.metadata.unwrap().keys, ["B"]);
        let mut required = lookup;
        required.required_keys = vec!["A".into()];
        assert_eq!(
            secrets.get_or_create(required).unwrap_err().code(),
            tonic::Code::NotFound
        );
    }

    #[test]
    fn bad_names_keys_and_anonymous_lookups_are_refused_without_showing_values() {
        use wire::ObjectCreationType as C;
        let secrets = Secrets::default();
        for bad in [
            request("a b", C::CreateIfMissing, &[]),
            request("s", C::CreateIfMissing, &[("1X", "hidden-value")]),
            request("", C::CreateIfMissing, &[]),
            request("s", C::Ephemeral, &[]),
        ] {
            let err = secrets.get_or_create(bad).unwrap_err();
            assert_eq!(err.code(), tonic::Code::InvalidArgument);
            assert!(!err.message().contains("hidden-value"));
        }
        let anonymous = secrets
            .get_or_create(request("", C::Ephemeral, &[("K", "v")]))
            .unwrap();
        assert!(secrets.names().is_empty());
        assert_eq!(
            secrets.env_for(&[anonymous.secret_id], &[]).unwrap()["K"],
            "v"
        );
    }

    #[test]
    fn updates_merge_and_remove_and_sources_apply_in_order() {
        use wire::ObjectCreationType as C;
        let secrets = Secrets::default();
        let id = secrets
            .get_or_create(request("s", C::CreateIfMissing, &[("A", "1"), ("B", "2")]))
            .unwrap()
            .secret_id;
        secrets
            .update(wire::SecretUpdateRequest {
                secret_id: id.clone(),
                updates: vec![
                    wire::secret_update_request::Update {
                        key: "A".into(),
                        value: Some("9".into()),
                    },
                    wire::secret_update_request::Update {
                        key: "B".into(),
                        value: None,
                    },
                ],
            })
            .unwrap();
        let inline = wire::SecretSource {
            source: Some(wire::secret_source::Source::Env(wire::StringMap {
                contents: [("C".to_owned(), "3".to_owned())].into(),
            })),
        };
        let env = secrets
            .env_for(std::slice::from_ref(&id), &[inline])
            .unwrap();
        assert_eq!(
            env,
            BTreeMap::from([("A".into(), "9".into()), ("C".into(), "3".into())])
        );
        assert_eq!(
            secrets
                .env_for(&["st-nope".into()], &[])
                .unwrap_err()
                .code(),
            tonic::Code::NotFound
        );
        secrets
            .delete(wire::SecretDeleteRequest {
                secret_id: id.clone(),
            })
            .unwrap();
        assert!(secrets.names().is_empty());
    }
}
