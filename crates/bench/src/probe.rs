//! Where "sandbox created -> remote started" goes: the three steps the
//! session runner takes between them, timed one by one outside the loop
//! with the same resolver and host backend.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use emulator::Emulator;
use host::{HostBackend, HostConfig};
use orchestrator::RemoteResolver;
use sandbox::{ProcessSpec, Sandbox, SandboxName, SandboxSpec};

use crate::report::{StartSteps, Summary};

/// Rounds of each step; enough for a stable p50 in a second or two.
const ROUNDS: usize = 20;

/// Times reading and re-verifying the binary, putting it into a fresh
/// sandbox as the session runner does (`put_executable`: a hard link to
/// the host backend's stored copy, which a warm-up round writes outside the
/// figures, as the phases' warm-up session does for `serve`), and spawning
/// a process through the shim (`/bin/true`, so the figure is the shim's
/// cost, not a remote's).
pub(crate) async fn start_steps(
    emu: &Emulator,
    root: &Path,
    shim_exe: &Path,
) -> anyhow::Result<StartSteps> {
    let resolver = RemoteResolver::new(&emu.static_base_url(), root.join("cache"))?;
    let remote = resolver.resolve(None, sandbox::Arch::current()).await?;
    let backend = HostBackend::new(HostConfig {
        root: root.join("host"),
        snapshot_dir: root.join("snapshots"),
        snapshot_store: None,
        shim_exe: shim_exe.to_owned(),
    })?;
    let create = async |session: &str| {
        backend
            .create(&SandboxSpec {
                name: SandboxName::for_session(session),
                labels: Default::default(),
                image: None,
                restore_from: None,
                resources: Default::default(),
                network: Default::default(),
            })
            .await
    };
    let warm_up = create("devin-probe-warm-up").await?;
    // Read past the resolver, whose first verification is a figure.
    let bytes = std::fs::read(&remote.path)
        .with_context(|| format!("reading {}", remote.path.display()))?;
    backend
        .put_executable(
            &warm_up,
            &format!("{}/devin-remote", warm_up.bin_dir),
            &bytes,
            &remote.sha256,
        )
        .await?;
    backend.destroy(&warm_up).await?;

    let mut verify = Vec::with_capacity(ROUNDS);
    let mut put = Vec::with_capacity(ROUNDS);
    let mut spawn = Vec::with_capacity(ROUNDS);
    for round in 0..ROUNDS {
        let handle = create(&format!("devin-probe{round}")).await?;
        let started = Instant::now();
        let bytes = resolver.verified_bytes(&remote).await?;
        verify.push(ms(started.elapsed()));

        let started = Instant::now();
        let path = format!("{}/devin-remote", handle.bin_dir);
        backend
            .put_executable(&handle, &path, &bytes, &remote.sha256)
            .await?;
        put.push(ms(started.elapsed()));

        let started = Instant::now();
        backend
            .spawn(
                &handle,
                &ProcessSpec {
                    name: "probe".to_owned(),
                    argv: vec!["/bin/true".to_owned()],
                    env: Default::default(),
                    cwd: handle.workdir.clone(),
                },
            )
            .await?;
        spawn.push(ms(started.elapsed()));
        // Let the shim see its child exit before the sandbox goes.
        tokio::time::sleep(Duration::from_millis(50)).await;
        backend.destroy(&handle).await?;
    }
    Ok(StartSteps {
        binary_bytes: remote_size(&remote.path),
        verify: Summary::of(&verify),
        put: Summary::of(&put),
        spawn: Summary::of(&spawn),
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn remote_size(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}
