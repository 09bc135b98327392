//! Where an object store is, how its URL is checked, and the client
//! built from it.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreScheme, RetryConfig};
use url::Url;

use crate::snapshot_store::crypt::SnapshotKey;

/// Where an object store is and how to reach it.
#[derive(Clone)]
pub struct ObjectStoreSettings {
    /// `s3://bucket/prefix`, `gs://…`, `az://…`: never with credentials,
    /// which the standard variables (`AWS_ACCESS_KEY_ID`, …) supply.
    pub url: Url,
    /// Extra settings of the store (`aws_endpoint`, …) over those of the
    /// environment: for tests and embedders.
    pub options: Vec<(String, String)>,
    /// Seals every archive written and requires every archive read to be
    /// sealed with it.
    pub key: Option<SnapshotKey>,
}

impl std::fmt::Debug for ObjectStoreSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let options: Vec<&str> = self.options.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("ObjectStoreSettings")
            .field("url", &self.url.as_str())
            .field("options", &options)
            .field("encrypted", &self.key.is_some())
            .finish()
    }
}

impl ObjectStoreSettings {
    /// Snapshots under `url`, with no encryption key.
    pub fn new(url: Url) -> Self {
        Self {
            url,
            options: Vec::new(),
            key: None,
        }
    }
}

/// Checks a snapshot store URL: a scheme `object_store` serves, no
/// credentials, no query. The reason never repeats a password.
pub fn check_url(url: &Url) -> std::result::Result<(), String> {
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not hold credentials: set them in the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, …)".into());
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err("must not have a query or fragment".into());
    }
    match ObjectStoreScheme::parse(url) {
        Ok((
            ObjectStoreScheme::AmazonS3
            | ObjectStoreScheme::GoogleCloudStorage
            | ObjectStoreScheme::MicrosoftAzure,
            _,
        )) => Ok(()),
        _ => Err(format!(
            "{}:// is not an object store Garrison keeps snapshots in: use s3://BUCKET/PREFIX, gs://BUCKET/PREFIX or az://CONTAINER/PREFIX (or a directory)",
            url.scheme()
        )),
    }
}

pub(super) fn build_store(
    settings: &ObjectStoreSettings,
) -> anyhow::Result<(Arc<dyn ObjectStore>, Path)> {
    let url = &settings.url;
    check_url(url).map_err(|reason| anyhow!("snapshot store {url}: {reason}"))?;
    let (scheme, prefix) = ObjectStoreScheme::parse(url)?;
    // A dead endpoint fails within seconds rather than minutes.
    let retry = RetryConfig {
        max_retries: 3,
        retry_timeout: Duration::from_secs(60),
        ..RetryConfig::default()
    };
    macro_rules! built {
        ($builder:ty) => {{
            let mut builder = <$builder>::from_env()
                .with_url(url.as_str())
                .with_retry(retry);
            for (key, value) in &settings.options {
                builder = builder.with_config(
                    key.parse()
                        .with_context(|| format!("snapshot store option {key}"))?,
                    value,
                );
            }
            Arc::new(builder.build()?) as Arc<dyn ObjectStore>
        }};
    }
    let store = match scheme {
        ObjectStoreScheme::AmazonS3 => built!(object_store::aws::AmazonS3Builder),
        ObjectStoreScheme::GoogleCloudStorage => {
            built!(object_store::gcp::GoogleCloudStorageBuilder)
        }
        ObjectStoreScheme::MicrosoftAzure => built!(object_store::azure::MicrosoftAzureBuilder),
        other => bail!("{other:?} is not a snapshot store"),
    };
    Ok((store, Path::parse(prefix)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_with_credentials_or_other_schemes_are_refused() {
        let check = |s: &str| check_url(&Url::parse(s).unwrap());
        assert!(check("s3://bucket/prefix").is_ok());
        assert!(check("gs://bucket/prefix").is_ok());
        assert!(check("az://container/prefix").is_ok());
        let secret = check("s3://AKIA:hunter2@bucket/prefix").unwrap_err();
        assert!(secret.contains("credentials") && !secret.contains("hunter2"));
        assert!(check("s3://bucket/prefix?x=1").is_err());
        assert!(check("ftp://bucket/prefix").unwrap_err().contains("ftp://"));
        assert!(check("memory:///x").is_err());
    }

    #[test]
    fn debug_never_shows_option_values() {
        let settings = ObjectStoreSettings {
            options: vec![("aws_secret_access_key".into(), "hunter2".into())],
            key: Some(SnapshotKey::from_hex(&"ab".repeat(32)).unwrap()),
            ..ObjectStoreSettings::new(Url::parse("s3://b/p").unwrap())
        };
        let shown = format!("{settings:?}");
        assert!(
            !shown.contains("hunter2") && !shown.contains("abab") && shown.contains("s3://b/p")
        );
    }
}
