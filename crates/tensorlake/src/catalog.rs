//! Tensorlake's sandbox-image catalog: named images a sandbox can be
//! created from (`image` in the create request), each registered from a
//! completed filesystem snapshot.
//!
//! Garrison uses the CAS image registry the official SDK builds into by
//! default, behind the API host's `/images/v4` ingress
//! (`src/sandbox_image_catalog.rs` of the `tensorlake` crate 0.5.x, read,
//! not copied): `POST /images/from-snapshot` registers (under an
//! `Idempotency-Key`, re-sent unchanged while the service answers
//! `503 publication_pending`), `GET /images` lists by cursor,
//! `GET|DELETE /images/name/{name}` find and remove. Names are the
//! registry's grammar ([`valid_image_name`]): lowercase, so the SDK's
//! `find_sandbox_image_by_name` finds what Garrison registers. The SDK's
//! legacy template registry (`/platform/v1/sandbox-templates`) is not
//! used: Garrison neither writes nor lists it.

use std::time::Duration;

use reqwest::Method;
use serde::{Deserialize, Serialize};

use crate::client::{Client, found};
use crate::error::{Error, Result};
use crate::http::{MAX_JSON_BYTES, read_bounded};
use crate::retry::Idempotency;

/// The ingress path of the CAS image registry on the API host.
pub const IMAGE_SERVICE_PATH: &str = "/images/v4";
/// Items per `GET /images` page (the SDK's page size).
const PAGE_SIZE: &str = "100";
/// Pages followed before a listing is refused as endless.
const MAX_PAGES: usize = 1000;
/// How long a registration waits while the service says it is pending.
const PUBLICATION_WAIT: Duration = Duration::from_secs(1800);
/// Pause between re-sent registrations while pending.
const PUBLICATION_POLL: Duration = Duration::from_secs(2);

/// One registered image, as the registry answers it. Unknown fields are
/// ignored; absent ones default, so a newer service still decodes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CatalogImage {
    /// The `image_` id: names the current image under `name`.
    pub id: String,
    /// The catalog name.
    pub name: String,
    /// The snapshot the current image was registered from.
    #[serde(default)]
    pub snapshot_id: String,
    /// Visible to every project.
    #[serde(default)]
    pub global: bool,
    /// Stored bytes.
    #[serde(default)]
    pub physical_size_bytes: u64,
    /// The root disk a sandbox of the image gets.
    #[serde(default)]
    pub logical_size_bytes: u64,
    /// RFC 3339.
    #[serde(default)]
    pub created_at: String,
    /// RFC 3339, when the name last got a new image.
    #[serde(default)]
    pub updated_at: String,
}

#[derive(Deserialize)]
struct Page {
    #[serde(default)]
    items: Vec<CatalogImage>,
    #[serde(default)]
    pagination: Option<Pagination>,
}

#[derive(Deserialize)]
struct Pagination {
    #[serde(default)]
    next: Option<String>,
}

/// Whether the registry can hold `name`: lowercase repository components
/// joined by `/`, each alphanumeric runs joined by single `.`, `_` or `-`,
/// with an optional `:tag`; at most 255 bytes, and not starting like an id
/// (`image_`, `sandbox_template_`) or a digest reference (`cas-v1:`).
pub(crate) fn valid_image_name(name: &str) -> bool {
    const RESERVED: [&str; 3] = ["image_", "sandbox_template_", "cas-v1:"];
    if name.is_empty() || name.len() > 255 || RESERVED.iter().any(|p| name.starts_with(p)) {
        return false;
    }
    // A bare 64-hex name would be read as a content digest.
    if name.len() == 64 && name.bytes().all(|b| b.is_ascii_hexdigit()) {
        return false;
    }
    let (repository, tag) = match name.split_once(':') {
        Some((repository, tag)) => (repository, Some(tag)),
        None => (name, None),
    };
    let tag_ok = tag.is_none_or(|t| {
        !t.is_empty()
            && t.len() <= 128
            && !t.starts_with(['.', '-'])
            && t.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
    });
    repository.split('/').all(valid_component) && tag_ok
}

fn valid_component(component: &str) -> bool {
    let mut after_separator = true;
    for b in component.bytes() {
        let separator = matches!(b, b'.' | b'_' | b'-');
        let alphanumeric = b.is_ascii_lowercase() || b.is_ascii_digit();
        if (separator && after_separator) || !(separator || alphanumeric) {
            return false;
        }
        after_separator = separator;
    }
    !component.is_empty() && !after_separator
}

/// Refuses a name the registry could not hold, saying what it accepts.
pub(crate) fn check_image_name(name: &str) -> Result<()> {
    if valid_image_name(name) {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "image name {name:?}: use lowercase letters and digits joined by single '.', '_' \
             or '-' (components may be joined by '/', and a ':tag' may follow), at most 255 \
             characters, not starting with image_ or sandbox_template_"
        )))
    }
}

/// Whether an answer says a registration is admitted but not published
/// yet: the same request is to be sent again under the same key.
pub(crate) fn is_publication_pending(error: &Error) -> bool {
    matches!(error, Error::Api { status: 503, code: Some(code), .. } if code == "publication_pending")
}

/// The catalog client: the lifecycle [`Client`]'s credentials and retry
/// policy, on the API host's [`IMAGE_SERVICE_PATH`].
#[derive(Clone, Debug)]
pub struct ImageCatalog {
    client: Client,
}

impl ImageCatalog {
    /// The catalog of the project `client` is authenticated for.
    pub fn new(client: &Client) -> Self {
        Self {
            client: client.clone(),
        }
    }

    fn url(&self, segments: &[&str]) -> url::Url {
        let mut url = self.client.api_url.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(["images", "v4", "images"]);
            path.extend(segments);
        }
        url
    }

    /// `/images/name/{name}`: the name's own `/` separate path segments,
    /// as the SDK sends them.
    fn name_url(&self, name: &str) -> Result<url::Url> {
        check_image_name(name)?;
        let mut segments = vec!["name"];
        segments.extend(name.split('/'));
        Ok(self.url(&segments))
    }

    /// Registers the completed snapshot `snapshot_id` as the image `name`
    /// (replacing the image the name held). One idempotency key covers the
    /// whole registration: a lost answer or a `publication_pending` one is
    /// answered by sending the same request again.
    pub async fn register(&self, name: &str, snapshot_id: &str) -> Result<CatalogImage> {
        check_image_name(name)?;
        if !sandbox::is_plain_id(snapshot_id) {
            return Err(Error::Invalid(format!(
                "invalid snapshot id {snapshot_id:?}"
            )));
        }
        let url = self.url(&["from-snapshot"]);
        let key = format!("garrison-{:032x}", rand::random::<u128>());
        let body = serde_json::json!({ "name": name, "snapshot_id": snapshot_id, "public": false });
        let deadline = tokio::time::Instant::now() + PUBLICATION_WAIT;
        loop {
            // Safe to send twice: the key makes the service answer a
            // repeat with the first result.
            let sent = self
                .client
                .http
                .send(Idempotency::Idempotent, |c| {
                    c.request(Method::POST, url.clone())
                        .header("Idempotency-Key", &key)
                        .json(&body)
                })
                .await;
            match sent {
                Ok(response) => {
                    let bytes = read_bounded(response, MAX_JSON_BYTES, "image").await?;
                    return serde_json::from_slice(&bytes)
                        .map_err(|e| Error::Decode(format!("registered image: {e}")));
                }
                Err(e) if is_publication_pending(&e) && tokio::time::Instant::now() < deadline => {
                    tracing::debug!(name, "image registration pending; asking again");
                    tokio::time::sleep(PUBLICATION_POLL).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Every image the project sees (its own and global ones), following
    /// the cursor to the end.
    pub async fn list(&self) -> Result<Vec<CatalogImage>> {
        let mut images = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let mut url = self.url(&[]);
            url.query_pairs_mut().append_pair("page_size", PAGE_SIZE);
            if let Some(cursor) = &cursor {
                url.query_pairs_mut().append_pair("cursor", cursor);
            }
            let page: Page = self
                .client
                .http
                .json(Idempotency::Idempotent, |c| c.get(url.clone()))
                .await?;
            images.extend(page.items);
            match page
                .pagination
                .and_then(|p| p.next)
                .filter(|n| !n.is_empty())
            {
                Some(next) if cursor.as_deref() != Some(next.as_str()) => cursor = Some(next),
                _ => return Ok(images),
            }
        }
        Err(Error::Decode(format!(
            "the image listing went on past {MAX_PAGES} pages"
        )))
    }

    /// The image named `name`, `None` when there is none.
    pub async fn find(&self, name: &str) -> Result<Option<CatalogImage>> {
        let url = self.name_url(name)?;
        found(
            self.client
                .http
                .json(Idempotency::Idempotent, |c| c.get(url.clone()))
                .await,
        )
    }

    /// Removes the image named `name`: `false` when there was none. A
    /// deletion the service finishes later (202) counts as done.
    pub async fn delete(&self, name: &str) -> Result<bool> {
        let url = self.name_url(name)?;
        let deleted = found(
            self.client
                .http
                .send(Idempotency::Idempotent, |c| {
                    c.request(Method::DELETE, url.clone())
                })
                .await,
        )?;
        Ok(deleted.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_registry_grammar() {
        for ok in ["garrison-session", "team/app:v1.2-rc", "a.b_c-d", "x1"] {
            assert!(valid_image_name(ok), "{ok}");
        }
        for bad in [
            "",
            "Garrison",
            "-a",
            "a-",
            "a..b",
            "team//app",
            "app:",
            "app:-x",
            "image_abc",
            "sandbox_template_abc",
            "a b",
            &"a".repeat(256),
            &"ab".repeat(32),
        ] {
            assert!(!valid_image_name(bad), "{bad:?}");
        }
        let err = check_image_name("Default").unwrap_err().to_string();
        assert!(err.contains("lowercase"), "{err}");
    }

    #[test]
    fn only_a_503_publication_pending_means_send_again() {
        let api = |status, code: Option<&str>| Error::Api {
            status,
            code: code.map(str::to_owned),
            message: String::new(),
        };
        assert!(is_publication_pending(&api(
            503,
            Some("publication_pending")
        )));
        assert!(!is_publication_pending(&api(503, None)));
        assert!(!is_publication_pending(&api(
            409,
            Some("publication_pending")
        )));
    }

    #[test]
    fn records_decode_with_unknown_and_missing_fields() {
        let image: CatalogImage = serde_json::from_value(serde_json::json!({
            "id": "image_1", "name": "app", "future_field": [1],
        }))
        .unwrap();
        assert_eq!(image.name, "app");
        assert_eq!(image.snapshot_id, "");
    }

    #[test]
    fn names_with_slashes_become_path_segments() {
        let client = Client::new("https://api.example.com", common::Secret::new("k")).unwrap();
        let catalog = ImageCatalog::new(&client);
        assert_eq!(
            catalog.name_url("team/app:v1").unwrap().as_str(),
            "https://api.example.com/images/v4/images/name/team/app:v1"
        );
        assert!(catalog.name_url("../x").is_err());
    }
}
