//! A real S3-compatible server for tests: moto's `moto_server` (installed
//! into the project's Python environment by `scripts/setup`, named by
//! `GARRISON_TEST_S3_SERVER`), started on a free port of a host the test
//! chooses (loopback, or an address of a network namespace the test made).
//! Other test crates include this file with `#[path]`.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Test credentials: moto accepts any.
pub(crate) const ACCESS_KEY: &str = "garrison-test-access";
/// See [`ACCESS_KEY`].
pub(crate) const SECRET_KEY: &str = "garrison-test-secret";
/// The region the test buckets are in.
pub(crate) const REGION: &str = "us-east-1";

/// A running `moto_server`, stopped when dropped.
pub struct S3Server {
    child: Child,
    /// `http://HOST:PORT`.
    pub endpoint: String,
}

impl S3Server {
    /// Starts the server bound to `host`; `None`, with a note on stderr,
    /// when `GARRISON_TEST_S3_SERVER` is unset (the caller skips).
    pub fn start(host: &str) -> Option<Self> {
        let Some(exe) = std::env::var_os("GARRISON_TEST_S3_SERVER") else {
            eprintln!(
                "skipping: GARRISON_TEST_S3_SERVER is unset (scripts/test sets it to target/python/bin/moto_server)"
            );
            return None;
        };
        for _ in 0..5 {
            let port = TcpListener::bind((host, 0))
                .and_then(|l| l.local_addr())
                .expect("no free port")
                .port();
            let mut child = Command::new(&exe)
                .args(["-H", host, "-p", &port.to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("starting moto_server");
            let deadline = Instant::now() + Duration::from_secs(120);
            while Instant::now() < deadline {
                if TcpStream::connect((host, port)).is_ok() {
                    return Some(Self {
                        child,
                        endpoint: format!("http://{host}:{port}"),
                    });
                }
                if child.try_wait().ok().flatten().is_some() {
                    break; // the port was taken meanwhile: another one
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("moto_server did not start");
    }

    /// Creates `bucket` (moto checks no signature on this).
    pub fn create_bucket(&self, bucket: &str) {
        let authority = self.endpoint.trim_start_matches("http://");
        let mut stream = TcpStream::connect(authority).expect("connecting to moto");
        write!(
            stream,
            "PUT /{bucket} HTTP/1.1\r\nHost: {authority}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        assert!(
            response.starts_with("HTTP/1.1 200"),
            "creating a bucket: {response}"
        );
    }

    /// The environment a Garrison needs to reach this server.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT_URL", self.endpoint.clone()),
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY.into()),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY.into()),
            ("AWS_REGION", REGION.into()),
            ("AWS_ALLOW_HTTP", "true".into()),
        ]
    }

    /// The same as `object_store` options, for stores made in-process.
    pub fn options(&self) -> Vec<(String, String)> {
        vec![
            ("aws_endpoint".into(), self.endpoint.clone()),
            ("aws_access_key_id".into(), ACCESS_KEY.into()),
            ("aws_secret_access_key".into(), SECRET_KEY.into()),
            ("aws_region".into(), REGION.into()),
            ("aws_allow_http".into(), "true".into()),
        ]
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
