//! Many hosts, one outpost: three Garrisons, each in its own network
//! namespace with its own state directory, share only the emulator and an
//! S3 bucket (moto's server, on the namespaces' bridge) and serve one
//! outpost together, with snapshots encrypted. A third of the sessions
//! suspend and resume twice; the first resume of each is steered to another
//! host (the host that suspended it is frozen while it is claimed), the
//! second lands wherever it lands; one host is killed with SIGKILL mid-way
//! and restarted. Every session must be served by one host at a time, find
//! its workspace byte for byte on every resume, and leave no snapshot behind.
//!
//! Needs root (namespaces) and `GARRISON_TEST_S3_SERVER` (set by
//! `scripts/test`); skipped with a message otherwise.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::bucket::Bucket;
use crate::common::hosts::Hosts;
use crate::common::*;
use emulator::{Emulator, Script, Then};
use fleet::SessionStatus;

const HOSTS: usize = 3;

/// The shape of one run: how many sessions, how many of them sleep.
struct Load {
    sessions: usize,
    sleepers: usize,
}

/// One session that suspends and resumes: what its workspace holds now.
struct Sleeper {
    id: String,
    note: String,
    /// The run-step outputs expected so far, in order.
    expected: Vec<String>,
}

fn note(n: usize, phase: usize) -> String {
    format!("note {n}.{phase} {:016x}", rand::random::<u64>())
}

/// The first phase: a note and a random blob with its checksum.
fn first_steps(note: &str) -> Vec<emulator::Step> {
    vec![
        write("note.txt", note),
        run("head -c 300000 /dev/urandom > blob && sha256sum blob > blob.sha256 && echo made"),
    ]
}

/// A resumed phase: the blob must match its checksum and the note must be
/// the last one written; then a new note.
fn resumed_steps(next_note: &str) -> Vec<emulator::Step> {
    vec![
        run("sha256sum -c --quiet blob.sha256 && cat note.txt"),
        write("note.txt", next_note),
    ]
}

fn run_outputs(emu: &Emulator, id: &str) -> Vec<String> {
    view(emu, id)
        .events("step")
        .filter(|e| e.detail.get("command").is_some())
        .map(|e| {
            e.detail
                .get("output")
                .and_then(|o| o.as_str())
                .unwrap_or_default()
                .trim()
                .to_owned()
        })
        .collect()
}

/// Who took each claim of the session (renewals excluded), in order.
fn claimants(emu: &Emulator, id: &str) -> Vec<String> {
    view(emu, id)
        .events("claimed")
        .filter_map(|e| e.detail.get("acceptor_id")?.as_str().map(str::to_owned))
        .collect()
}

/// The host that served each phase of the session: the holder of the
/// claim when its remote connected. (A host may lose a claim it could not
/// start in time; only the one that connected served.)
fn servers(emu: &Emulator, id: &str) -> Vec<String> {
    let mut holder = String::new();
    let mut served = Vec::new();
    for e in &view(emu, id).transcript {
        match e.kind.as_str() {
            "claimed" => {
                holder = e.detail["acceptor_id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
            }
            "connected" => served.push(holder.clone()),
            _ => {}
        }
    }
    served
}

/// No claim on the row: released, or the row is gone.
fn unclaimed(emu: &Emulator, id: &str) -> bool {
    view(emu, id)
        .entry
        .is_none_or(|e| e.status.phase != fleet::Phase::Claimed)
}

fn suspended_and_released(emu: &Emulator, id: &str) -> bool {
    status_is(emu, id, SessionStatus::Suspended) && unclaimed(emu, id)
}

fn acceptor(n: usize) -> String {
    format!("host-{n}")
}

/// Polls until `check` holds; after [`HANG_GUARD`] panics with `what`
/// and every host's log.
async fn wait_hosts(what: &str, garrisons: &[Garrison], mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + HANG_GUARD;
    while !check() {
        if tokio::time::Instant::now() > deadline {
            panic!("timed out waiting for {what}\n{}", host_logs(garrisons));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn host_logs(garrisons: &[Garrison]) -> String {
    garrisons
        .iter()
        .enumerate()
        .map(|(n, g)| format!("--- host {n} ---\n{}", g.log()))
        .collect()
}

async fn serve_one_outpost_from_three_hosts(backend: Backend, load: Load) {
    if !backend.available() {
        return;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: network namespaces need root");
        return;
    }
    let hosts = Hosts::build(HOSTS);
    let shared = hosts.shared_addr();
    let Some(bucket) = Bucket::start_on(&shared.to_string()) else {
        return;
    };
    let mut env = bucket.env();
    env.push((
        "GARRISON_SNAPSHOT_KEY".into(),
        format!("{:016x}", rand::random::<u64>()).repeat(4),
    ));
    let emu = emulator_with(|c| {
        c.listen = (shared, 0).into();
        c.claim_ttl = Duration::from_secs(30);
    })
    .await;
    let outpost = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let mut garrisons: Vec<Garrison> = (0..HOSTS)
        .map(|n| {
            let state = dir.path().join(format!("host-{n}"));
            Garrison::start_on_behind(
                &emu,
                GarrisonOptions {
                    outpost: &outpost,
                    state_dir: &state,
                    extra_args: vec![
                        "--acceptor-id".into(),
                        acceptor(n),
                        "--snapshot-store".into(),
                        bucket.url(),
                        "--max-concurrent".into(),
                        load.sessions.to_string(),
                    ],
                },
                backend,
                env.clone(),
                hosts.prefix(n),
            )
        })
        .collect();

    // Every third session sleeps; the others run a while and end.
    let every = load.sessions / load.sleepers;
    let mut plain: Vec<(usize, String)> = Vec::new();
    let mut sleepers: Vec<Sleeper> = Vec::new();
    for n in 0..load.sessions {
        if n % every == 0 && sleepers.len() < load.sleepers {
            let note = note(n, 0);
            let id = session(&emu, &outpost, first_steps(&note), Then::Sleep);
            sleepers.push(Sleeper {
                id,
                note,
                expected: vec!["made".into()],
            });
        } else {
            let id = session(
                &emu,
                &outpost,
                vec![run(&format!("sleep 3 && echo served-{n}"))],
                Then::End,
            );
            plain.push((n, id));
        }
    }

    // Mid-way, while sessions run and snapshots are taken, one host dies.
    wait_hosts("a third of the sessions connected", &garrisons, || {
        emu.sessions()
            .iter()
            .filter(|v| v.outpost_id == outpost && v.connections > 0)
            .count()
            >= load.sessions / 3
    })
    .await;
    garrisons[1].crash_and_restart();

    for s in &sleepers {
        wait_hosts("first suspend", &garrisons, || {
            suspended_and_released(&emu, &s.id)
        })
        .await;
    }

    // Resume 1: the host that suspended the session is frozen until another
    // host has claimed it, so the workspace must travel.
    for (n, g) in garrisons.iter().enumerate() {
        let ids: Vec<usize> = sleepers
            .iter()
            .enumerate()
            .filter(|(_, s)| servers(&emu, &s.id).last() == Some(&acceptor(n)))
            .map(|(i, _)| i)
            .collect();
        if ids.is_empty() {
            continue;
        }
        g.freeze(true);
        let mut claims_before = Vec::new();
        for &i in &ids {
            let s = &mut sleepers[i];
            claims_before.push(claimants(&emu, &s.id).len());
            let next = note(i, 1);
            emu.resume(
                &s.id,
                Script {
                    steps: resumed_steps(&next),
                    then: Then::Sleep,
                },
            )
            .unwrap();
            s.expected.push(std::mem::replace(&mut s.note, next));
        }
        for (&i, before) in ids.iter().zip(claims_before) {
            let id = sleepers[i].id.clone();
            wait_hosts("claimed by another host", &garrisons, || {
                claimants(&emu, &id).len() > before
            })
            .await;
        }
        g.freeze(false);
    }
    for s in &sleepers {
        wait_hosts("second suspend", &garrisons, || {
            suspended_and_released(&emu, &s.id)
        })
        .await;
    }

    // Resume 2: wherever it lands, then the session ends.
    for (i, s) in sleepers.iter_mut().enumerate() {
        let next = note(i, 2);
        emu.resume(
            &s.id,
            Script {
                steps: resumed_steps(&next),
                then: Then::End,
            },
        )
        .unwrap();
        s.expected.push(std::mem::replace(&mut s.note, next));
    }
    let all: Vec<&String> = plain
        .iter()
        .map(|(_, id)| id)
        .chain(sleepers.iter().map(|s| &s.id))
        .collect();
    for id in &all {
        wait_hosts("terminated and released", &garrisons, || {
            status_is(&emu, id, SessionStatus::Terminated) && unclaimed(&emu, id)
        })
        .await;
    }

    let log = host_logs(&garrisons);
    for id in &all {
        let v = view(&emu, id);
        assert_eq!(
            v.events("duplicate_connection").count(),
            0,
            "{id}: two remotes at once\n{log}"
        );
    }
    for (n, id) in &plain {
        assert_eq!(
            run_outputs(&emu, id),
            vec![format!("served-{n}")],
            "{id}: ran once\n{log}"
        );
        assert_eq!(view(&emu, id).connections, 1, "{id}\n{log}");
    }
    let mut moves = 0;
    let mut served_by: BTreeMap<String, usize> = BTreeMap::new();
    for s in &sleepers {
        assert_eq!(
            run_outputs(&emu, &s.id),
            s.expected,
            "{}: every resume finds its workspace\n{log}",
            s.id
        );
        assert_eq!(view(&emu, &s.id).connections, 3, "{}\n{log}", s.id);
        let served = servers(&emu, &s.id);
        moves += served.windows(2).filter(|w| w[0] != w[1]).count();
        for c in served {
            *served_by.entry(c).or_default() += 1;
        }
    }
    assert!(
        moves >= load.sleepers.min(10),
        "only {moves} resumes moved host\n{log}"
    );
    assert!(
        !log.contains("no snapshot to resume from"),
        "a snapshot was lost\n{log}"
    );
    eprintln!("{moves} resumes moved host; phases per host: {served_by:?}");

    // Ended sessions leave nothing in the store.
    let deadline = std::time::Instant::now() + HANG_GUARD;
    loop {
        let left: Vec<String> = bucket
            .archives()
            .await
            .into_iter()
            .map(|(path, _)| path.to_string())
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "snapshots leaked: {left:?}\n{}",
            host_logs(&garrisons)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Nor any sandbox (with its network namespace) on any host.
    for (n, g) in garrisons.iter().enumerate() {
        wait_hosts(&format!("host {n}'s sandboxes gone"), &garrisons, || {
            sandbox_dirs(&g.state_dir) == 0
        })
        .await;
    }
    drop(garrisons);
    drop(hosts);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hosts_serve_one_outpost_on_the_host_backend() {
    serve_one_outpost_from_three_hosts(
        Backend::Host,
        Load {
            sessions: 60,
            sleepers: 20,
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hosts_serve_one_outpost_on_the_local_backend() {
    serve_one_outpost_from_three_hosts(
        Backend::Local,
        Load {
            sessions: 60,
            sleepers: 20,
        },
    )
    .await;
}
