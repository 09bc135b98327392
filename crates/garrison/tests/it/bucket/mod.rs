//! A bucket on a real S3-compatible server (moto, see `s3_support`) for
//! the end-to-end tests that keep snapshots in object storage, and ways to
//! look at what Garrison left in it.
#![allow(dead_code)]

// The sandbox crate's conformance support shares this file; its `pub` is
// theirs to keep.
#[path = "../../../../sandbox/src/s3_support.rs"]
#[allow(unreachable_pub)]
mod s3_support;

use std::sync::Arc;

use futures::TryStreamExt;
use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
#[allow(unused_imports)] // each test file uses its own part
pub(crate) use s3_support::{S3Server, SECRET_KEY};

/// A bucket of its own on a server of its own.
pub(crate) struct Bucket {
    pub server: S3Server,
    pub name: String,
}

impl Bucket {
    /// On loopback; `None` (the test skips) without `GARRISON_TEST_S3_SERVER`.
    pub(crate) fn start() -> Option<Self> {
        Self::start_on("127.0.0.1")
    }

    /// On `host` (an address of a network the test made).
    pub(crate) fn start_on(host: &str) -> Option<Self> {
        let server = S3Server::start(host)?;
        let name = format!("e2e-{:08x}", rand::random::<u32>());
        server.create_bucket(&name);
        Some(Self { server, name })
    }

    pub(crate) fn url(&self) -> String {
        format!("s3://{}/garrison", self.name)
    }

    /// The store's flag and the environment that reaches it.
    pub(crate) fn serve_args(&self) -> Vec<String> {
        vec!["--snapshot-store".into(), self.url()]
    }

    pub(crate) fn env(&self) -> Vec<(String, String)> {
        self.server
            .env()
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect()
    }

    pub(crate) fn raw(&self) -> Arc<dyn ObjectStore> {
        let mut builder = AmazonS3Builder::new().with_bucket_name(&self.name);
        for (key, value) in self.server.options() {
            builder = builder.with_config(key.parse().unwrap(), value);
        }
        Arc::new(builder.build().unwrap())
    }

    pub(crate) async fn objects(&self) -> Vec<(ObjectPath, Vec<u8>)> {
        let raw = self.raw();
        let listed: Vec<_> = raw.list(None).try_collect().await.unwrap();
        let mut objects = Vec::new();
        for meta in listed {
            // A Garrison may delete it between the listing and the read.
            let Ok(got) = raw.get(&meta.location).await else {
                continue;
            };
            let bytes = got.bytes().await.unwrap();
            objects.push((meta.location, bytes.to_vec()));
        }
        objects
    }

    pub(crate) async fn archives(&self) -> Vec<(ObjectPath, Vec<u8>)> {
        self.objects()
            .await
            .into_iter()
            .filter(|(path, _)| path.as_ref().ends_with(".tar.zst"))
            .collect()
    }
}
