//! The object store the hosts share: moto's S3 server (as the tests use)
//! on the bridge's address, one bucket, and its listing for the leftover
//! check. moto checks no signatures, so plain HTTP requests do.

use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// Test credentials: moto accepts any.
const ACCESS_KEY: &str = "garrison-chaos-access";
const SECRET_KEY: &str = "garrison-chaos-secret";

/// A running `moto_server` with one bucket, stopped on drop.
pub(crate) struct Store {
    child: Child,
    /// Where it listens.
    pub(crate) addr: SocketAddr,
    bucket: String,
}

/// The S3 server: `$GARRISON_TEST_S3_SERVER`, else `target/python/bin/moto_server`
/// (what `scripts/setup` installs) from the current directory up.
pub(crate) fn locate_server() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("GARRISON_TEST_S3_SERVER") {
        return Some(PathBuf::from(p)).filter(|p| p.is_file());
    }
    let cwd = std::env::current_dir().ok()?;
    cwd.ancestors()
        .map(|d| d.join("target/python/bin/moto_server"))
        .find(|p| p.is_file())
}

impl Store {
    /// Starts the server on `host` and creates a bucket.
    pub(crate) async fn start(exe: &std::path::Path, host: Ipv4Addr) -> anyhow::Result<Store> {
        let port = TcpListener::bind((host, 0))?.local_addr()?.port();
        let addr = SocketAddr::from((host, port));
        let child = Command::new(exe)
            .args(["-H", &host.to_string(), "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", exe.display()))?;
        let bucket = format!("chaos-{:08x}", rand::random::<u32>());
        let mut store = Store {
            child,
            addr,
            bucket,
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        while TcpStream::connect(addr).is_err() {
            if store.child.try_wait()?.is_some() || Instant::now() > deadline {
                bail!("{} did not start on {addr}", exe.display());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let made = reqwest::Client::new()
            .put(store.bucket_url())
            .send()
            .await?;
        if !made.status().is_success() {
            bail!("creating the bucket: {}", made.status());
        }
        Ok(store)
    }

    fn bucket_url(&self) -> String {
        format!("http://{}/{}", self.addr, self.bucket)
    }

    /// The `--snapshot-store` value.
    pub(crate) fn url(&self) -> String {
        format!("s3://{}/garrison", self.bucket)
    }

    /// The environment a Garrison needs to reach it.
    pub(crate) fn env(&self) -> Vec<(String, String)> {
        [
            ("AWS_ENDPOINT_URL", format!("http://{}", self.addr)),
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY.into()),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY.into()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_ALLOW_HTTP", "true".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    /// Every object's key.
    pub(crate) async fn keys(&self) -> anyhow::Result<Vec<String>> {
        let mut keys = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut url = format!("{}?list-type=2", self.bucket_url());
            if let Some(t) = &token {
                url.push_str("&continuation-token=");
                url.push_str(
                    &url::form_urlencoded::byte_serialize(t.as_bytes()).collect::<String>(),
                );
            }
            let body = reqwest::get(&url).await?.error_for_status()?.text().await?;
            keys.extend(elements(&body, "Key"));
            token = elements(&body, "NextContinuationToken").into_iter().next();
            if token.is_none() {
                return Ok(keys);
            }
        }
    }
}

/// The texts of every `<name>...</name>` in an XML answer.
fn elements(xml: &str, name: &str) -> Vec<String> {
    let open = format!("<{name}>");
    let close = format!("</{name}>");
    xml.split(&open)
        .skip(1)
        .filter_map(|rest| rest.split(&close).next())
        .map(|s| s.replace("&amp;", "&"))
        .collect()
}

impl Drop for Store {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_come_from_the_listing() {
        let xml = "<ListBucketResult><Contents><Key>garrison/a.tar.zst</Key></Contents>\
                   <Contents><Key>b&amp;c</Key></Contents></ListBucketResult>";
        assert_eq!(elements(xml, "Key"), ["garrison/a.tar.zst", "b&c"]);
        assert!(elements(xml, "NextContinuationToken").is_empty());
    }
}
