//! The simulator against a tiny websocket gateway written in the test:
//! handshake headers, every step kind, and every way a session ends.

use crate::common;

use std::os::unix::fs::PermissionsExt;

use common::{Sim, SimEnv, patiently};
use futures::{SinkExt, StreamExt};
use gateway_proto::{GatewayMessage, RemoteMessage};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::StatusCode;

const TOKEN: &str = "conn-token-7f3a9c1e";
const SESSION: &str = "devin-fake-1";

/// One listening socket on loopback; each test accepts one connection.
struct FakeGateway {
    listener: TcpListener,
}

/// What the simulator sent in its upgrade request.
#[derive(Debug, Default)]
struct Seen {
    authorization: Option<String>,
    session_id: Option<String>,
}

struct Conn {
    ws: WebSocketStream<TcpStream>,
}

impl FakeGateway {
    async fn bind() -> FakeGateway {
        FakeGateway {
            listener: TcpListener::bind("127.0.0.1:0").await.unwrap(),
        }
    }

    fn url(&self) -> String {
        format!("ws://{}/gateway", self.listener.local_addr().unwrap())
    }

    fn start_sim(&self) -> Sim {
        self.start_sim_at(&self.url())
    }

    fn start_sim_at(&self, url: &str) -> Sim {
        Sim::start(SimEnv {
            gateway_url: url,
            token: TOKEN,
            session_id: SESSION,
            extra: &[],
        })
    }

    /// Accepts the upgrade (answering `refusal` instead when given) and
    /// reports the credentials the simulator presented.
    async fn handshake(&self, refusal: Option<StatusCode>) -> (Option<Conn>, Seen) {
        let (stream, _) = patiently("the simulator to connect", self.listener.accept())
            .await
            .unwrap();
        let mut seen = Seen::default();
        // The callback's error type is tungstenite's, large or not.
        #[allow(clippy::result_large_err)]
        let callback = |request: &Request, response: Response| -> Result<Response, ErrorResponse> {
            let header = |name: &str| {
                request
                    .headers()
                    .get(name)
                    .map(|v| v.to_str().unwrap().to_string())
            };
            seen.authorization = header("authorization");
            seen.session_id = header("x-devin-session-id");
            match refusal {
                None => Ok(response),
                Some(status) => Err(tokio_tungstenite::tungstenite::http::Response::builder()
                    .status(status)
                    .body(Some("refused".into()))
                    .unwrap()),
            }
        };
        let result = tokio_tungstenite::accept_hdr_async(stream, callback).await;
        let conn = match refusal {
            None => Some(Conn {
                ws: result.unwrap(),
            }),
            Some(_) => None,
        };
        (conn, seen)
    }

    /// Accepts the simulator, checks its credentials and its hello.
    async fn accept(&self) -> Conn {
        let (conn, seen) = self.handshake(None).await;
        assert_eq!(
            seen.authorization.as_deref(),
            Some(&*format!("Bearer {TOKEN}"))
        );
        assert_eq!(seen.session_id.as_deref(), Some(SESSION));
        let mut conn = conn.unwrap();
        match conn.recv().await {
            RemoteMessage::Hello {
                session_id,
                cwd,
                pid,
                version,
            } => {
                assert_eq!(session_id, SESSION);
                assert!(cwd.ends_with("/work"), "{cwd}");
                assert!(pid > 0);
                assert!(!version.is_empty());
            }
            other => panic!("expected hello, got {other:?}"),
        }
        conn
    }
}

impl Conn {
    async fn send(&mut self, message: GatewayMessage) {
        let text = serde_json::to_string(&message).unwrap();
        self.ws.send(Message::text(text)).await.unwrap();
    }

    async fn recv(&mut self) -> RemoteMessage {
        loop {
            let message = patiently("a message from the simulator", self.ws.next())
                .await
                .expect("simulator hung up")
                .unwrap();
            if let Message::Text(text) = message {
                return serde_json::from_str(&text).unwrap();
            }
        }
    }

    /// Sends a step and returns (exit_code, output, truncated).
    async fn step(&mut self, message: GatewayMessage) -> (i32, String, bool) {
        let sent_id = match &message {
            GatewayMessage::Exec { id, .. } | GatewayMessage::WriteFile { id, .. } => *id,
            other => panic!("not a step: {other:?}"),
        };
        self.send(message).await;
        match self.recv().await {
            RemoteMessage::Result {
                id,
                exit_code,
                output,
                truncated,
            } => {
                assert_eq!(id, sent_id);
                (exit_code, output, truncated)
            }
            other => panic!("expected a result, got {other:?}"),
        }
    }

    async fn exec(&mut self, id: u64, command: &str) -> (i32, String, bool) {
        self.step(GatewayMessage::Exec {
            id,
            command: command.into(),
        })
        .await
    }

    /// Waits for the simulator's close frame and completes the handshake.
    async fn expect_close(mut self) {
        loop {
            match patiently("the simulator to close", self.ws.next()).await {
                Some(Ok(Message::Close(_))) | None => break,
                Some(Ok(_)) => continue,
                Some(Err(err)) => panic!("unclean close: {err}"),
            }
        }
        // Drive the reply to the close frame out.
        let _ = patiently("the close to finish", self.ws.next()).await;
    }
}

#[tokio::test]
async fn runs_steps_and_exits_0_on_sleep() {
    let gateway = FakeGateway::bind().await;
    let mut sim = gateway.start_sim();
    let mut conn = gateway.accept().await;

    let (code, output, truncated) = conn.exec(1, "echo hello; echo oops >&2; exit 5").await;
    assert_eq!(
        (code, output.as_str(), truncated),
        (5, "hello\noops\n", false)
    );

    let (code, output, _) = conn.exec(2, "pwd").await;
    assert_eq!(code, 0);
    assert_eq!(
        output.trim_end(),
        sim.workdir.canonicalize().unwrap().to_str().unwrap()
    );

    let (code, _, _) = conn
        .step(GatewayMessage::WriteFile {
            id: 3,
            path: "notes/today/plan.md".into(),
            content: "ship it\n".into(),
        })
        .await;
    assert_eq!(code, 0);
    let written = std::fs::read_to_string(sim.workdir.join("notes/today/plan.md")).unwrap();
    assert_eq!(written, "ship it\n");

    let (_, output, truncated) = conn.exec(4, "head -c 100000 /dev/zero | tr '\\0' x").await;
    assert!(truncated);
    assert_eq!(output.len(), gateway_proto::MAX_OUTPUT_BYTES);

    conn.send(GatewayMessage::Sleep).await;
    conn.expect_close().await;
    let (code, stderr) = sim.finish().await;
    assert_eq!(code, 0, "{stderr}");
}

#[tokio::test]
async fn exits_0_on_end() {
    let gateway = FakeGateway::bind().await;
    let mut sim = gateway.start_sim();
    let mut conn = gateway.accept().await;
    conn.send(GatewayMessage::End).await;
    conn.expect_close().await;
    let (code, stderr) = sim.finish().await;
    assert_eq!(code, 0, "{stderr}");
}

#[tokio::test]
async fn refuses_paths_outside_the_workdir() {
    let gateway = FakeGateway::bind().await;
    let mut sim = gateway.start_sim();
    let mut conn = gateway.accept().await;

    for (id, path) in [
        (1, "../escaped.txt"),
        (2, "a/../../escaped.txt"),
        (3, "/tmp/escaped.txt"),
    ] {
        let (code, output, _) = conn
            .step(GatewayMessage::WriteFile {
                id,
                path: path.into(),
                content: "no".into(),
            })
            .await;
        assert_eq!(code, 1, "{path}");
        assert!(output.contains("refusing"), "{path}: {output}");
    }
    assert!(!sim.workdir.parent().unwrap().join("escaped.txt").exists());

    conn.send(GatewayMessage::End).await;
    conn.expect_close().await;
    assert_eq!(sim.finish().await.0, 0);
}

#[tokio::test]
async fn the_connect_token_stays_out_of_commands_and_state() {
    let gateway = FakeGateway::bind().await;
    let mut sim = gateway.start_sim();
    let mut conn = gateway.accept().await;

    let (code, env, _) = conn.exec(1, "env").await;
    assert_eq!(code, 0);
    assert!(!env.contains(TOKEN), "token visible to commands:\n{env}");
    assert!(!env.contains("DEVIN_OUTPOST_CONNECT_TOKEN"), "{env}");
    // The rest of the environment is kept.
    assert!(
        env.contains(&format!("DEVIN_OUTPOST_SESSION_ID={SESSION}")),
        "{env}"
    );
    assert!(env.contains("PATH="), "{env}");

    conn.send(GatewayMessage::Sleep).await;
    conn.expect_close().await;
    let (code, stderr) = sim.finish().await;
    assert_eq!(code, 0);
    assert!(!stderr.contains(TOKEN), "{stderr}");

    let mode = std::fs::metadata(&sim.state_dir)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700);
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(sim.state_dir.join("state.json")).unwrap())
            .unwrap();
    assert_eq!(state["session_id"], SESSION);
    assert_eq!(state["connections"], 1);
    assert!(state["pid"].as_u64().unwrap() > 0);

    let steps = std::fs::read_to_string(sim.state_dir.join("steps.log")).unwrap();
    let kinds: Vec<String> = steps
        .lines()
        .map(|line| {
            let step: serde_json::Value = serde_json::from_str(line).unwrap();
            step["step"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(kinds, ["exec", "sleep"]);

    for entry in std::fs::read_dir(&sim.state_dir).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(TOKEN),
            "token written to {}",
            path.display()
        );
    }
}

#[tokio::test]
async fn exits_3_when_the_handshake_is_refused() {
    let gateway = FakeGateway::bind().await;
    let mut sim = gateway.start_sim();
    let (_, seen) = gateway.handshake(Some(StatusCode::UNAUTHORIZED)).await;
    assert_eq!(seen.session_id.as_deref(), Some(SESSION));
    let (code, stderr) = sim.finish().await;
    assert_eq!(code, 3, "{stderr}");
    assert!(stderr.contains("401"), "{stderr}");
    assert!(!stderr.contains(TOKEN), "{stderr}");
}

#[tokio::test]
async fn exits_with_the_code_it_is_told_to_crash_with() {
    let gateway = FakeGateway::bind().await;
    let mut sim = gateway.start_sim();
    let mut conn = gateway.accept().await;
    conn.send(GatewayMessage::Crash { id: 9, code: 42 }).await;
    let (code, stderr) = sim.finish().await;
    assert_eq!(code, 42, "{stderr}");
}

#[tokio::test]
async fn exits_1_when_the_gateway_drops_the_connection() {
    let gateway = FakeGateway::bind().await;
    let mut sim = gateway.start_sim();
    let conn = gateway.accept().await;
    drop(conn);
    let (code, stderr) = sim.finish().await;
    assert_eq!(code, 1, "{stderr}");
}

#[tokio::test]
async fn exits_1_when_the_gateway_closes_without_sleep_or_end() {
    let gateway = FakeGateway::bind().await;
    let mut sim = gateway.start_sim();
    let mut conn = gateway.accept().await;
    conn.ws.close(None).await.unwrap();
    // Read the simulator's answer so the closing handshake completes.
    while let Some(Ok(_)) = patiently("the close to finish", conn.ws.next()).await {}
    drop(conn);
    let (code, stderr) = sim.finish().await;
    assert_eq!(code, 1, "{stderr}");
}

#[tokio::test]
async fn dials_localhost_by_name() {
    let gateway = FakeGateway::bind().await;
    let port = gateway.listener.local_addr().unwrap().port();
    let mut sim = gateway.start_sim_at(&format!("ws://localhost:{port}/gateway"));
    let mut conn = gateway.accept().await;
    conn.send(GatewayMessage::End).await;
    conn.expect_close().await;
    assert_eq!(sim.finish().await.0, 0);
}

#[tokio::test]
async fn exits_4_when_the_gateway_is_unreachable() {
    // A port bound but never listened on: held for the whole test, so no
    // other test can take it, and every connection to it is refused.
    let reserved = tokio::net::TcpSocket::new_v4().unwrap();
    reserved.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let port = reserved.local_addr().unwrap().port();
    let url = format!("ws://127.0.0.1:{port}/gateway");
    let mut sim = Sim::start(SimEnv {
        gateway_url: &url,
        token: TOKEN,
        session_id: SESSION,
        extra: &[("DEVIN_REMOTE_SIM_CONNECT_BUDGET_SECS", "1")],
    });
    let (code, stderr) = sim.finish().await;
    assert_eq!(code, 4, "{stderr}");
}

#[tokio::test]
async fn a_lost_connection_ends_a_running_command() {
    let gateway = FakeGateway::bind().await;
    let mut sim = gateway.start_sim();
    let mut conn = gateway.accept().await;
    // Never finishes by itself: the simulator must notice the lost
    // connection while the command runs, or this test times out.
    conn.send(GatewayMessage::Exec {
        id: 1,
        command: "sleep 3600".into(),
    })
    .await;
    drop(conn);
    let (code, stderr) = sim.finish().await;
    assert_eq!(code, 1, "{stderr}");
}
