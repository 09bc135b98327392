//! A flood of lookups from inside a real sandbox, under runc and runsc, is
//! held to its resolver's budget, and another sandbox's lookups keep
//! working meanwhile. The upstream is a fake resolver of the test's on the
//! host's loopback, which answers every name and counts what reaches it.
//!
//! Root and the test image are needed (see `support`).

use std::net::{SocketAddr, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::*;
use local::net::{QUERIES_PER_SEC, QUERY_BURST};
use sandbox::{ProcessSpec, ProcessStatus, Sandbox};

/// Label of the flood's names: `qNNNNN.flood.test`.
const FLOOD_LABEL: &[u8] = b"\x05flood\x04test\x00";

/// What the fake upstream has received from the flood: how many, and when
/// the last one came.
#[derive(Default)]
struct Seen {
    flood: usize,
    last_flood: Option<Instant>,
    other: usize,
}

/// A resolver on the host's loopback answering every A query with one
/// address; what it saw.
fn fake_upstream() -> (SocketAddr, Arc<Mutex<Seen>>) {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = socket.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let counts = Arc::clone(&seen);
    std::thread::spawn(move || {
        let mut buf = [0u8; 1500];
        loop {
            let Ok((n, from)) = socket.recv_from(&mut buf) else {
                continue;
            };
            let Some(reply) = answer(&buf[..n]) else {
                continue;
            };
            {
                let mut seen = counts.lock().unwrap();
                if buf[..n]
                    .windows(FLOOD_LABEL.len())
                    .any(|w| w == FLOOD_LABEL)
                {
                    seen.flood += 1;
                    seen.last_flood = Some(Instant::now());
                } else {
                    seen.other += 1;
                }
            }
            let _ = socket.send_to(&reply, from);
        }
    });
    (addr, seen)
}

/// The query's header and question, made an answer with one A record.
fn answer(query: &[u8]) -> Option<Vec<u8>> {
    let mut end = 12;
    while *query.get(end)? != 0 {
        end += 1 + usize::from(query[end]);
    }
    let end = end + 1 + 4;
    let mut reply = query.get(..end)?.to_vec();
    reply[2] |= 0x80;
    reply[3] = 0x80;
    reply[6..12].copy_from_slice(&[0, 1, 0, 0, 0, 0]);
    reply.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 198, 51, 100, 77]);
    Some(reply)
}

/// A queries for ever new names to the sandbox's resolver, as fast as bash
/// can write them: at least 20,000, and until `flood-stop` exists in its
/// directory, the workdir (not `/tmp`, the Sentry's own tmpfs under runsc);
/// at most 60 s. Then prints why it stopped and how many it sent.
const FLOOD: &str = r"
exec 3<>/dev/udp/127.0.0.53/53
end=$((SECONDS + 60))
i=0
while { [ $i -lt 20000 ] || [ ! -e flood-stop ]; } && [ $SECONDS -lt $end ]; do
  printf '\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x06q%05d\x05flood\x04test\x00\x00\x01\x00\x01' $((i % 100000)) >&3
  i=$((i + 1))
done
if [ -e flood-stop ]; then echo stopped $i; else echo timed-out $i; fi
";

/// Ten lookups of `ok.test` in a row, each printing the reply's rcode and
/// answer count (`0 1` for a good answer), or `none:` and dd's complaint.
const LOOKUPS: &str = r#"
for n in 0 1 2 3 4 5 6 7 8 9; do
  exec 3<>/dev/udp/127.0.0.53/53
  printf '\x43\x2'$n'\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x02ok\x04test\x00\x00\x01\x00\x01' >&3
  # Under runsc a read before the reply came fails at once (EAGAIN) instead
  # of blocking: read again, for at most 10 s.
  for try in $(seq 100); do
    reply=$(timeout 10 dd bs=512 count=1 <&3 2>/tmp/lookup.err | od -An -tx1 -N8)
    [ -n "$reply" ] && break
    sleep 0.1
  done
  exec 3>&-
  set -- $reply
  if [ $# -eq 8 ]; then echo $(( 0x$4 & 15 )) $(( 0x$7 * 256 + 0x$8 )); else echo none: $(cat /tmp/lookup.err); fi
done
"#;

async fn run_in(s: &Sized, script: &str) -> sandbox::ProcessRef {
    let spec = ProcessSpec {
        name: format!("sh-{:08x}", rand::random::<u32>()),
        argv: vec!["/bin/bash".into(), "-c".into(), script.into()],
        env: [("PATH".to_owned(), "/usr/local/bin:/usr/bin:/bin".to_owned())].into(),
        cwd: s.handle.workdir.clone(),
    };
    s.backend.spawn(&s.handle, &spec).await.unwrap()
}

/// Runs `script` with bash and waits for it: its status and output.
async fn bash(s: &Sized, script: &str) -> (ProcessStatus, String) {
    let process = run_in(s, script).await;
    let status = tokio::time::timeout(
        Duration::from_secs(120),
        sandbox::wait_exit(
            s.backend.as_ref(),
            &s.handle,
            &process,
            Duration::from_millis(25),
        ),
    )
    .await
    .expect("the script finishes")
    .unwrap();
    (status, output_of(s, &process).await)
}

async fn output_of(s: &Sized, process: &sandbox::ProcessRef) -> String {
    let chunk = s
        .backend
        .read_output(&s.handle, process, 0, 1 << 20)
        .await
        .unwrap();
    String::from_utf8_lossy(&chunk.data).into_owned()
}

async fn a_flood_is_held_to_the_budget(runtime: Runtime) {
    let Some(config) = config_for(runtime) else {
        return;
    };
    let (upstream, seen) = fake_upstream();
    let backend = Arc::new(
        local::LocalBackend::new(config)
            .unwrap()
            .with_dns_upstream(upstream),
    );
    let flooder = sandbox_in(&backend, "local-dnsflood", sized(1.0, 256, 256), None).await;
    let neighbour = sandbox_in(&backend, "local-dnsok", sized(1.0, 256, 256), None).await;

    // Tokens saved up before this instant are at most the burst; every
    // flood query reaches the upstream after it.
    let start = Instant::now();
    let flood = run_in(&flooder, FLOOD).await;
    let guard = Instant::now() + Duration::from_secs(60);
    while seen.lock().unwrap().flood == 0 {
        assert!(
            Instant::now() < guard,
            "the flood never reached the upstream"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The neighbour, during the flood.
    let (status, out) = bash(&neighbour, LOOKUPS).await;
    assert_eq!(status, ProcessStatus::Exited(0), "{out}");
    assert_eq!(out.lines().collect::<Vec<_>>(), vec!["0 1"; 10], "{out}");

    flooder
        .backend
        .put_file(
            &flooder.handle,
            &format!("{}/flood-stop", flooder.handle.workdir),
            b"",
            0o644,
        )
        .await
        .unwrap();
    let status = tokio::time::timeout(
        Duration::from_secs(120),
        sandbox::wait_exit(
            backend.as_ref(),
            &flooder.handle,
            &flood,
            Duration::from_millis(50),
        ),
    )
    .await
    .expect("the flood stops")
    .unwrap();
    let out = output_of(&flooder, &flood).await;
    assert_eq!(status, ProcessStatus::Exited(0), "{out}");
    // Still flooding when the neighbour's lookups were done.
    let sent: usize = out
        .strip_prefix("stopped ")
        .unwrap_or_else(|| panic!("the flood ran through the lookups: {out}"))
        .trim()
        .parse()
        .unwrap();

    // Whatever reached the upstream by its last flood query was let through
    // by the bucket between `start` and then: at most the burst plus the
    // rate over that time (measured, so a slow machine only loosens it).
    let (flood_count, last) = {
        let seen = seen.lock().unwrap();
        (seen.flood, seen.last_flood.unwrap())
    };
    let elapsed = last.duration_since(start).as_secs_f64();
    let allowed = QUERY_BURST + QUERIES_PER_SEC * elapsed;
    eprintln!(
        "{runtime}: the flood sent {sent} queries; {flood_count} reached the upstream \
         in {elapsed:.1} s (budget {allowed:.0})"
    );
    assert!(
        flood_count as f64 <= allowed + 1.0,
        "{flood_count} flood queries reached the upstream in {elapsed:.1} s; the budget is {allowed:.0}"
    );
    // A flood it was: far more were sent than the budget let through.
    assert!(sent > 2 * flood_count, "{sent} sent, {flood_count} through");

    backend.destroy(&flooder.handle).await.unwrap();
    backend.destroy(&neighbour.handle).await.unwrap();
}

under_both_runtimes!(a_flood_is_held_to_the_budget);
