//! A Modal backend wired to a fresh mock.

use std::sync::Arc;
use std::time::Duration;

use common::Secret;
use modal::{ClientConfig, Credentials, ModalBackend, ModalSettings, RetryPolicy};
use modal_mock::{MockConfig, MockModal};

pub(crate) const OUTPOST: &str = "outpost_conformance";

pub(crate) struct Setup {
    pub mock: Arc<MockModal>,
    pub settings: ModalSettings,
    _dir: Arc<tempfile::TempDir>,
}

pub(crate) async fn start(config: impl FnOnce(&mut MockConfig)) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let mut mock_config = MockConfig::new(dir.path().join("mock"));
    config(&mut mock_config);
    let mock = MockModal::start(mock_config).await.unwrap();
    let settings = ModalSettings {
        idle_timeout: None,
        runtime: None,
        environment: None,
        client: ClientConfig {
            api_url: mock.url(),
            credentials: Credentials {
                token_id: Secret::new(mock.token_id()),
                token_secret: Secret::new(mock.token_secret()),
            },
            retry: RetryPolicy {
                attempts: 4,
                initial_backoff: Duration::from_millis(10),
                max_backoff: Duration::from_millis(50),
            },
        },
        outpost_id: Some(OUTPOST.to_owned()),
        image: Some(mock.base_image_id()),
        image_cache: None,
        memory_records: Some(dir.path().join("memory")),
        regions: vec!["us-east".to_owned()],
        timeout: Duration::from_secs(3600),
    };
    Setup {
        mock: Arc::new(mock),
        settings,
        _dir: Arc::new(dir),
    }
}

impl Setup {
    pub(crate) fn backend(&self) -> Arc<ModalBackend> {
        Arc::new(ModalBackend::new(self.settings.clone()).unwrap())
    }

    pub(crate) fn harness(self) -> sandbox::conformance::Harness {
        let backend = self.backend();
        sandbox::conformance::Harness {
            backend,
            image: None,
            finds_snapshots_by_name: false,
            reopen: Box::new(move || {
                let _keep = (&self.mock, &self._dir);
                self.backend()
            }),
        }
    }
}
