//! Devin's reference, "Platform validation": the worker "refuses an OS
//! mismatch with a clear message". `garrison serve` refuses, before it
//! claims anything and with exit code 78 (EX_CONFIG), an outpost whose
//! platform its backend does not run, from its setting or from the outpost
//! as the fleet API describes it.

use std::time::Duration;

use crate::common::*;
use emulator::Then;
use fleet::{Platform, SessionStatus};

async fn wait_exit(g: &mut Garrison) -> std::process::ExitStatus {
    let deadline = tokio::time::Instant::now() + HANG_GUARD;
    loop {
        if let Some(status) = g.child.try_wait().unwrap() {
            return status;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "garrison did not exit\n{}",
            g.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn serve_with_config(emu: &emulator::Emulator, dir: &std::path::Path, table: &str) -> Garrison {
    let state = dir.join("state");
    let config = dir.join("garrison.toml");
    std::fs::write(
        &config,
        format!(
            "api_url = \"{}\"\nstatic_base_url = \"{}\"\nbackend = \"host\"\n\n{table}",
            emu.base_url(),
            emu.static_base_url()
        ),
    )
    .unwrap();
    Garrison::start_with_args(
        emu,
        &state,
        vec![
            "serve".into(),
            "--config".into(),
            config.display().to_string(),
            "--state-dir".into(),
            state.display().to_string(),
            // Never the default port: the two tests here run at once.
            "--listen".into(),
            "127.0.0.1:0".into(),
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_windows_platform_setting_is_refused_at_start_with_exit_78() {
    let emu = emulator().await;
    let outpost = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let id = session(&emu, &outpost, vec![run("echo never")], Then::End);
    let mut g = serve_with_config(
        &emu,
        dir.path(),
        &format!("[[outpost]]\nid = \"{outpost}\"\nplatform = \"windows\"\n"),
    );
    let status = wait_exit(&mut g).await;
    assert_eq!(status.code(), Some(78), "{}", g.log());
    let log = g.log();
    assert!(
        log.contains("is for windows sessions (its platform setting)")
            && log.contains("its backend host runs linux"),
        "{log}"
    );
    assert!(
        status_is(&emu, &id, SessionStatus::Pending),
        "never claimed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outpost_the_fleet_api_says_is_windows_is_refused_at_start() {
    let emu = emulator().await;
    let outpost = emu.create_outpost(
        &format!("win-{:08x}", rand::random::<u32>()),
        Platform::Windows,
    );
    let dir = tempfile::tempdir().unwrap();
    let mut g = serve_with_config(
        &emu,
        dir.path(),
        &format!("[[outpost]]\nid = \"{outpost}\"\n"),
    );
    let status = wait_exit(&mut g).await;
    assert_eq!(status.code(), Some(78), "{}", g.log());
    let log = g.log();
    assert!(
        log.contains("is for windows sessions (its spec.platform in the fleet API)")
            && log.contains("backend host runs linux"),
        "{log}"
    );
}
