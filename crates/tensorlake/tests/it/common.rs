//! A mock Tensorlake and a backend pointed at it.

use std::sync::Arc;

use tensorlake::{RetryPolicy, Secret, TensorlakeBackend, TensorlakeConfig};
use tensorlake_mock::{MockConfig, MockTensorlake};

pub(crate) const KEY: &str = "tl-test-key-0123456789";

pub(crate) struct World {
    pub mock: Arc<MockTensorlake>,
    pub dir: Arc<tempfile::TempDir>,
}

impl World {
    pub(crate) async fn start() -> Self {
        Self::start_with(|_| {}).await
    }

    pub(crate) async fn start_with(tweak: impl FnOnce(&mut MockConfig)) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = MockConfig::new(KEY, dir.path().join("mock"));
        tweak(&mut config);
        let mock = MockTensorlake::start(config).await.expect("mock");
        Self {
            mock: Arc::new(mock),
            dir: Arc::new(dir),
        }
    }

    pub(crate) fn config(&self) -> TensorlakeConfig {
        TensorlakeConfig {
            api_url: self.mock.url().to_owned(),
            sandbox_api_url: None,
            api_key: Secret::new(KEY),
            default_image: Some("garrison-test".into()),
            timeout_secs: 1800,
            sandbox_root: self.mock.sandbox_root_template(),
            state_dir: self.dir.path().join("backend"),
            retry: RetryPolicy {
                max_attempts: 4,
                base: std::time::Duration::from_millis(10),
                cap: std::time::Duration::from_millis(100),
            },
        }
    }

    pub(crate) fn backend(&self) -> Arc<TensorlakeBackend> {
        Arc::new(TensorlakeBackend::new(self.config()).expect("backend"))
    }

    pub(crate) fn harness(self) -> sandbox::conformance::Harness {
        let backend = self.backend();
        let world = self;
        sandbox::conformance::Harness {
            backend,
            reopen: Box::new(move || world.backend() as Arc<dyn sandbox::Sandbox>),
            image: Some("garrison-test".into()),
            finds_snapshots_by_name: false,
        }
    }
}
