//! A sandbox's desktop, kept alive: Xvfb on [`DESKTOP_DISPLAY`] (with the
//! image's window manager, when it has one) started when the sandbox is
//! made, checked to answer before the remote can start, and started again
//! by [`LocalBackend::keep_desktop`] when it dies or stops answering.
//!
//! "Answers" means the X server replies to an X11 connection setup on its
//! socket, `/tmp/.X11-unix/X<n>` in the sandbox, reached from the host
//! through the sandbox's root (see `Root::connect_unix`): no process is
//! started in the sandbox to check. Under gVisor a socket made in the
//! sandbox is not a host file, so there the X server's process being alive
//! is taken as the answer.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, anyhow};
use sandbox::{
    DesktopState, Handle, ProcessRef, ProcessSpec, ProcessStatus, Sandbox, SandboxError,
};

use super::{DESKTOP_DISPLAY, LocalBackend, fatal};
use crate::rootfs::Root;
use crate::runc::Runtime;

/// Host-side record of the sandbox's desktop process: its name and when
/// it was started (Unix ms), so a later check finds it.
const DESKTOP_FILE: &str = "desktop";

/// How long a new X server may take to answer before create gives up
/// (Xvfb answers in well under a second; a loaded host is slower).
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a running X server may go without answering before it is
/// taken to hang and is restarted (it may be starting).
const STARTUP_GRACE: Duration = Duration::from_secs(30);

/// How long one probe waits for the X server's reply.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// What to do about the desktop, from what was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Action {
    Keep,
    Wait,
    Restart(&'static str),
}

/// `answers`: whether the X server replied (`None`: cannot be asked, as
/// under gVisor); `process`: the status of the desktop process Garrison
/// started (`None`: none recorded, or gone); `age`: since it was started.
pub(super) fn decide(
    answers: Option<bool>,
    process: Option<ProcessStatus>,
    age: Duration,
) -> Action {
    match (answers, process) {
        // Whoever runs it, a display that answers is what the remote needs.
        (Some(true), _) => Action::Keep,
        (_, None | Some(ProcessStatus::Exited(_) | ProcessStatus::Lost)) => {
            Action::Restart("the X server was not running")
        }
        (None, Some(ProcessStatus::Running)) => Action::Keep,
        (Some(false), Some(ProcessStatus::Running)) if age < STARTUP_GRACE => Action::Wait,
        (Some(false), Some(ProcessStatus::Running)) => {
            Action::Restart("the X server stopped answering")
        }
    }
}

/// The desktop's script: clears a stale lock (a restored or restarted
/// sandbox may hold the old server's), starts the image's window manager
/// once the display's socket is there, and becomes the X server (so the
/// process Garrison watches is the server, and a kill of its group takes
/// the window manager too). `$0` is the X server; the window manager is
/// found by name, the first of matchbox and openbox the image has.
fn script() -> String {
    let n = DESKTOP_DISPLAY.trim_start_matches(':');
    format!(
        "rm -f /tmp/.X{n}-lock /tmp/.X11-unix/X{n}\n\
         wm=$(command -v matchbox-window-manager || command -v openbox || true)\n\
         if [ -n \"$wm\" ]; then\n\
           (i=0; while [ ! -S /tmp/.X11-unix/X{n} ]; do\n\
              i=$((i+1)); [ $i -gt 600 ] && exit 0; sleep 0.1; done\n\
            case $wm in *matchbox*) set -- -use_titlebar no;; *) set --;; esac\n\
            DISPLAY={DESKTOP_DISPLAY} exec \"$wm\" \"$@\") </dev/null &\n\
         fi\n\
         exec \"$0\" {DESKTOP_DISPLAY} -screen 0 1920x1080x24 -nolisten tcp\n"
    )
}

/// Sends an X11 connection setup (little-endian, protocol 11.0, no
/// authorization) and reads the first byte of the reply: any reply (a
/// refusal included) is a server that answers.
fn x_answers(root: &Root) -> bool {
    let n = DESKTOP_DISPLAY.trim_start_matches(':');
    let Ok(mut stream) = root.connect_unix(&format!("/tmp/.X11-unix/X{n}")) else {
        return false;
    };
    let setup = [b'l', 0, 11, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    let mut reply = [0u8; 1];
    stream.set_read_timeout(Some(PROBE_TIMEOUT)).is_ok()
        && stream.set_write_timeout(Some(PROBE_TIMEOUT)).is_ok()
        && stream.write_all(&setup).is_ok()
        && stream.read_exact(&mut reply).is_ok()
        && reply[0] <= 2
}

impl LocalBackend {
    /// The image's X server when the desktop is on, else `None`.
    fn desktop_server(&self, handle: &Handle) -> anyhow::Result<Option<String>> {
        if !self.config.desktop {
            return Ok(None);
        }
        let image = handle
            .image
            .as_deref()
            .context("the sandbox has no image")?;
        Ok(self.config.images.resolve(image)?.xvfb_path)
    }

    /// Starts the desktop (when it is on) and waits until the X server
    /// answers: in every sandbox created, also one restored from a
    /// snapshot (whose processes did not survive it).
    pub(super) async fn start_desktop(&self, handle: &Handle) -> anyhow::Result<()> {
        let Some(xvfb) = self.desktop_server(handle)? else {
            return Ok(());
        };
        let process = self.spawn_desktop(handle, xvfb).await?;
        let deadline = tokio::time::Instant::now() + START_TIMEOUT;
        loop {
            if self.probe(handle).await? != Some(false) {
                return Ok(());
            }
            if let Ok(ProcessStatus::Exited(_) | ProcessStatus::Lost) =
                self.process_status(handle, &process)
            {
                let output = Sandbox::read_output(self, handle, &process, 0, 4096)
                    .await
                    .map(|o| String::from_utf8_lossy(&o.data).into_owned())
                    .unwrap_or_default();
                return Err(anyhow!("the X server exited at start: {}", output.trim()));
            }
            if tokio::time::Instant::now() > deadline {
                return Err(SandboxError::Transient(anyhow!(
                    "the X server on {DESKTOP_DISPLAY} did not answer within {START_TIMEOUT:?}"
                ))
                .into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn spawn_desktop(&self, handle: &Handle, xvfb: String) -> anyhow::Result<ProcessRef> {
        let started = chrono::Utc::now().timestamp_millis();
        let spec = ProcessSpec {
            name: format!("desktop-{started}"),
            argv: vec!["/bin/sh".into(), "-c".into(), script(), xvfb],
            env: BTreeMap::from([("PATH".to_owned(), "/usr/bin:/bin".to_owned())]),
            cwd: "/".to_owned(),
        };
        let process = self.spawn_process(handle, &spec).await?;
        let dir = self.existing_dir(handle)?;
        shim::write_atomically(
            &dir.join(DESKTOP_FILE),
            format!("{} {started}\n", process.id).as_bytes(),
        )?;
        Ok(process)
    }

    /// Whether the X server answers; `None` where it cannot be asked.
    async fn probe(&self, handle: &Handle) -> sandbox::Result<Option<bool>> {
        if self.runtime_of(&handle.name).runtime == Runtime::Runsc {
            return Ok(None);
        }
        let root = self.root(handle)?;
        tokio::task::spawn_blocking(move || Some(x_answers(&root)))
            .await
            .map_err(fatal)
    }

    /// `Sandbox::keep_desktop`: see the module documentation.
    pub(super) async fn keep_desktop_of(&self, handle: &Handle) -> sandbox::Result<DesktopState> {
        let Some(xvfb) = self.desktop_server(handle).map_err(fatal)? else {
            return Ok(DesktopState::NoDesktop);
        };
        let dir = self.existing_dir(handle)?;
        let answers = self.probe(handle).await?;
        let recorded = read_record(&dir);
        let (process, age) = match &recorded {
            Some((process, started)) => {
                let status = self.process_status(handle, process).ok();
                let age = chrono::Utc::now()
                    .timestamp_millis()
                    .saturating_sub(*started);
                (status, Duration::from_millis(age.max(0) as u64))
            }
            None => (None, Duration::ZERO),
        };
        match decide(answers, process, age) {
            Action::Keep => Ok(DesktopState::Answering),
            Action::Wait => Ok(DesktopState::Starting),
            Action::Restart(reason) => {
                if let Some((process, _)) = recorded {
                    self.kill_process(handle, &process, Duration::from_secs(2))
                        .await?;
                }
                tracing::warn!(sandbox = %handle.name, reason, "restarting the desktop's X server");
                self.spawn_desktop(handle, xvfb).await.map_err(fatal)?;
                Ok(DesktopState::Restarted {
                    reason: reason.to_owned(),
                })
            }
        }
    }
}

/// The recorded desktop process and its start time, if any.
fn read_record(dir: &Path) -> Option<(ProcessRef, i64)> {
    let text = std::fs::read_to_string(dir.join(DESKTOP_FILE)).ok()?;
    let (id, started) = text.trim().split_once(' ')?;
    Some((ProcessRef { id: id.to_owned() }, started.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: Duration = Duration::from_secs(3600);

    #[test]
    fn an_answering_display_is_kept_whoever_runs_it() {
        for process in [
            None,
            Some(ProcessStatus::Exited(0)),
            Some(ProcessStatus::Running),
        ] {
            assert_eq!(decide(Some(true), process, LONG), Action::Keep);
        }
    }

    #[test]
    fn a_dead_or_unrecorded_server_is_restarted() {
        for answers in [Some(false), None] {
            for process in [
                None,
                Some(ProcessStatus::Exited(1)),
                Some(ProcessStatus::Lost),
            ] {
                assert!(
                    matches!(decide(answers, process, Duration::ZERO), Action::Restart(_)),
                    "{answers:?} {process:?}"
                );
            }
        }
    }

    #[test]
    fn a_silent_server_gets_a_grace_then_is_restarted() {
        let running = Some(ProcessStatus::Running);
        assert_eq!(
            decide(Some(false), running, Duration::from_secs(1)),
            Action::Wait
        );
        assert_eq!(
            decide(Some(false), running, LONG),
            Action::Restart("the X server stopped answering")
        );
        // Where it cannot be asked (gVisor), alive is taken as answering.
        assert_eq!(decide(None, running, LONG), Action::Keep);
    }

    #[test]
    fn the_script_starts_the_window_manager_and_becomes_the_server() {
        let script = script();
        assert!(script.starts_with("rm -f /tmp/.X99-lock /tmp/.X11-unix/X99\n"));
        assert!(script.contains("matchbox-window-manager"));
        assert!(script.ends_with("exec \"$0\" :99 -screen 0 1920x1080x24 -nolisten tcp\n"));
    }
}
