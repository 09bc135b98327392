//! No process of a sandbox outlives it as a zombie of Garrison's. Garrison
//! (here: the test's process, which the backend makes a subreaper) is
//! handed every host process a sandbox leaves behind; under runsc a fork
//! bomb ends the Sentry and leaves hundreds of gVisor's stub processes to
//! it at once, which nothing but the reaper's sweep waits for.
//!
//! Root and the test image are needed (see `support`).

use std::time::{Duration, Instant};

use crate::support::*;
use sandbox::{ProcessSpec, Sandbox};

/// This process's children that have ended and not been reaped.
fn zombie_children() -> Vec<u32> {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            let Some((_, rest)) = stat.rsplit_once(')') else {
                return false;
            };
            let mut fields = rest.split_whitespace();
            fields.next() == Some("Z") && fields.next() == Some(me.as_str())
        })
        .collect()
}

/// A fork bomb, bounded by `timeout` and the sandbox's task limit, then a
/// destroy: afterwards no zombie child is left (within a generous wait that
/// only stops a test that would otherwise hang).
async fn a_fork_bomb_leaves_no_zombie(runtime: Runtime) {
    let Some(s) = sandbox_on(runtime, sized(1.0, 512, 256)).await else {
        return;
    };
    let spec = ProcessSpec {
        name: format!("bomb-{:08x}", rand::random::<u32>()),
        argv: vec![
            "/bin/bash".into(),
            "-c".into(),
            "timeout -s KILL 10 bash -c ':(){ :|:& };:'".into(),
        ],
        env: [("PATH".to_owned(), "/usr/local/bin:/usr/bin:/bin".to_owned())].into(),
        cwd: s.handle.workdir.clone(),
    };
    let bomb = s.backend.spawn(&s.handle, &spec).await.unwrap();
    // The bomb ends by its timeout, or with the whole sandbox (runsc: the
    // Sentry dies at the task limit); either way, whatever it says.
    let _ = tokio::time::timeout(
        Duration::from_secs(90),
        sandbox::wait_exit(
            s.backend.as_ref(),
            &s.handle,
            &bomb,
            Duration::from_millis(100),
        ),
    )
    .await;
    s.backend.destroy(&s.handle).await.unwrap();
    let guard = Instant::now() + Duration::from_secs(60);
    let mut zombies = zombie_children();
    while !zombies.is_empty() && Instant::now() < guard {
        tokio::time::sleep(Duration::from_millis(200)).await;
        zombies = zombie_children();
    }
    let names: Vec<String> = zombies
        .iter()
        .take(5)
        .filter_map(|pid| {
            let read = |file: &str| std::fs::read_to_string(format!("/proc/{pid}/{file}"));
            Some(format!(
                "{} in {}",
                read("stat").ok()?,
                read("cgroup").ok()?
            ))
        })
        .collect();
    assert!(
        zombies.is_empty(),
        "{} zombies outlived the sandbox, e.g. {names:?}",
        zombies.len()
    );
}

under_both_runtimes!(a_fork_bomb_leaves_no_zombie);
