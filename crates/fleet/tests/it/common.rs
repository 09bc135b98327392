//! Shared set-up: an emulator, a client on its account token, one outpost.

use std::time::Duration;

use emulator::{Emulator, EmulatorConfig, NewSession, Script, Then};
use fleet::{Backoff, ClientOptions, FleetClient, RetryPolicy, Secret, WatchItem};
use futures::{Stream, StreamExt};
use gateway_proto::{RemoteMessage, SESSION_HEADER};
use tokio_tungstenite::tungstenite::{Message, client::IntoClientRequest};

/// Stops a hung test; no assertion depends on it.
pub(crate) const HANG: Duration = Duration::from_secs(60);

pub(crate) struct Env {
    pub emu: Emulator,
    pub client: FleetClient,
    pub outpost: String,
}

/// Client options with short backoffs, so retries and reconnects do not
/// slow the suite.
pub(crate) fn options() -> ClientOptions {
    ClientOptions {
        retry: RetryPolicy {
            attempts: 8,
            backoff: Backoff::new(Duration::from_millis(2), Duration::from_millis(50)),
        },
        watch_backoff: Backoff::new(Duration::from_millis(10), Duration::from_millis(200)),
        ..ClientOptions::default()
    }
}

pub(crate) async fn env(config: EmulatorConfig) -> Env {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let emu = Emulator::start(config).await.expect("emulator starts");
    let client = client(&emu, &emu.account_token());
    let outpost = emu.create_outpost("lab", fleet::Platform::Linux);
    Env {
        emu,
        client,
        outpost,
    }
}

pub(crate) fn client(emu: &Emulator, token: &str) -> FleetClient {
    FleetClient::new(&emu.base_url(), Secret::new(token), options()).expect("client builds")
}

/// A checked session id for the client's calls.
pub(crate) fn sid(id: &str) -> fleet::SessionId {
    fleet::SessionId::new(id).unwrap()
}

impl Env {
    /// Enqueues a session that stays running until told otherwise.
    pub(crate) fn session(&self, id: Option<&str>) -> String {
        self.emu
            .create_session(NewSession {
                outpost_id: self.outpost.clone(),
                session_id: id.map(str::to_owned),
                script: Script {
                    steps: vec![],
                    then: Then::Wait,
                },
                ..Default::default()
            })
            .expect("session enqueued")
    }
}

/// Polls `check` until it returns `Some`; panics only after [`HANG`].
pub(crate) async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + HANG;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "gave up waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The next item of a never-ending stream, or a panic after [`HANG`].
pub(crate) async fn next<S: Stream<Item = WatchItem> + Unpin>(watch: &mut S) -> WatchItem {
    tokio::time::timeout(HANG, watch.next())
        .await
        .expect("watch item within the hang limit")
        .expect("watch_forever never ends")
}

pub(crate) type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Dials the gateway as `devin-remote` would with a claim's connect token,
/// which makes the session `running`. Keep the socket to keep it running.
pub(crate) async fn connect_remote(gateway_url: &str, session_id: &str, token: &Secret) -> Socket {
    let mut req = gateway_url.into_client_request().expect("gateway URL");
    let headers = req.headers_mut();
    headers.insert(
        "authorization",
        format!("Bearer {}", token.expose())
            .parse()
            .expect("header"),
    );
    headers.insert(SESSION_HEADER, session_id.parse().expect("header"));
    let (mut socket, _) = tokio_tungstenite::connect_async(req)
        .await
        .expect("gateway admits the remote");
    let hello = RemoteMessage::Hello {
        session_id: session_id.to_owned(),
        cwd: "/work".into(),
        pid: 1,
        version: "fleet-test".into(),
    };
    let text = serde_json::to_string(&hello).expect("hello encodes");
    futures::SinkExt::send(&mut socket, Message::Text(text.into()))
        .await
        .expect("hello sent");
    socket
}
