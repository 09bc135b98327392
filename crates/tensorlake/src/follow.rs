//! `garrison logs -f` for a session on Tensorlake: its output followed
//! from inside its sandbox, over Tensorlake's PTY websocket.
//!
//! The backend appends the output of every process it starts to
//! `<root>/output.log` in the sandbox; a PTY session runs `tail -F` on it
//! from a byte offset. The sandbox is looked at through the lifecycle API
//! only (never the data plane) while it is not running, so following never
//! wakes it: while it is suspended the follower waits, and it attaches
//! again, from the offset it had reached, once the sandbox runs. It stops
//! when the sandbox is gone.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use sandbox::SandboxName;
use sandbox::plugin::{FollowStart, LogFollower};

use crate::TensorlakeSettings;
use crate::models::{CreatePty, SandboxInfo, SandboxStatus};
use crate::pty::PtyEvent;
use crate::{Client, SandboxClient};

/// How often a sandbox that is not running is looked at.
const POLL: Duration = Duration::from_millis(500);

/// Prints the first line (the offset `tail` starts from) and then the file
/// from there; `end` starts at its current end, `lines:N` at its last N
/// lines. The terminal is put in raw mode so that the bytes arrive as
/// written (no `\n` -> `\r\n`).
const TAIL_SCRIPT: &str = r#"stty raw -echo 2>/dev/null
f=$1; o=$2
case "$o" in
  end) o=$( (wc -c <"$f") 2>/dev/null || echo 0) ;;
  lines:*)
    size=$( (wc -c <"$f") 2>/dev/null || echo 0)
    last=$( (tail -n "${o#lines:}" -- "$f" | wc -c) 2>/dev/null || echo 0)
    o=$((size - last)) ;;
esac
o=$((o + 0))
printf 'garrison-offset %s\n' "$o"
exec tail -c +$((o + 1)) -F -- "$f" 2>/dev/null"#;
const OFFSET_PREFIX: &[u8] = b"garrison-offset ";

/// A session's sandbox on Tensorlake, and how to reach it.
pub(crate) struct Follower {
    client: Client,
    sandbox_root: String,
    name: SandboxName,
    /// The sandbox followed and the offset reached in its output.
    position: Option<(String, u64)>,
    /// PTY sessions to remove once their sandbox runs again.
    stale: Vec<(String, String)>,
}

/// Where one attachment starts; `None` is the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum From {
    Offset(u64),
    LastLines(u64),
}

impl Follower {
    /// Follows session `session_id`'s output through `client`.
    pub(crate) fn new(client: Client, settings: &TensorlakeSettings, session_id: &str) -> Self {
        Self {
            client,
            sandbox_root: settings.sandbox_root.clone(),
            name: SandboxName::for_session(session_id),
            position: None,
            stale: Vec::new(),
        }
    }

    async fn find(&self) -> anyhow::Result<Option<SandboxInfo>> {
        Ok(self.client.find_by_name(self.name.as_str()).await?)
    }

    /// One attachment: until the websocket closes (a suspend, an idle
    /// timeout, the sandbox deleted).
    async fn attach(
        &mut self,
        dp: &SandboxClient,
        sandbox_id: &str,
        offset: Option<From>,
        out: &mut (dyn FnMut(&[u8]) -> std::io::Result<()> + Send),
    ) -> anyhow::Result<()> {
        let file = crate::backend::output_log_of(&self.sandbox_root, sandbox_id);
        let from = match offset {
            None => "end".to_owned(),
            Some(From::Offset(o)) => o.to_string(),
            Some(From::LastLines(n)) => format!("lines:{n}"),
        };
        let pty = dp
            .create_pty(&CreatePty {
                command: "/bin/sh".into(),
                args: vec!["-c".into(), TAIL_SCRIPT.into(), "sh".into(), file, from],
                env: BTreeMap::from([(
                    "PATH".to_owned(),
                    "/usr/local/bin:/usr/bin:/bin".to_owned(),
                )]),
                working_dir: None,
                rows: 24,
                cols: 200,
            })
            .await?;
        self.stale
            .push((sandbox_id.to_owned(), pty.session_id.clone()));
        let mut connection = dp.connect_pty(&pty).await?;
        let mut preamble: Option<Vec<u8>> = Some(Vec::new());
        while let Some(event) = connection.next_event().await {
            let PtyEvent::Output(bytes) = event else {
                break;
            };
            let data = match preamble.as_mut() {
                Some(head) => {
                    head.extend_from_slice(&bytes);
                    let Some((start, rest)) = split_preamble(head) else {
                        continue;
                    };
                    self.position = Some((sandbox_id.to_owned(), start));
                    let rest = rest.to_vec();
                    preamble = None;
                    rest
                }
                None => bytes,
            };
            if data.is_empty() {
                continue;
            }
            out(&data)?;
            if let Some((_, offset)) = self.position.as_mut() {
                *offset += data.len() as u64;
            }
        }
        connection.close().await;
        Ok(())
    }

    /// Removes the PTY sessions of earlier attachments to this sandbox
    /// (best effort: only a running sandbox is asked).
    async fn remove_stale(&mut self, sandbox_id: &str, dp: &SandboxClient) {
        let (here, elsewhere): (Vec<_>, Vec<_>) = std::mem::take(&mut self.stale)
            .into_iter()
            .partition(|(id, _)| id == sandbox_id);
        self.stale = elsewhere;
        for (_, session) in here {
            let _ = dp.delete_pty(&session).await;
        }
    }
}

#[async_trait]
impl LogFollower for Follower {
    async fn exists(&self) -> anyhow::Result<bool> {
        Ok(self.find().await?.is_some())
    }

    /// Returns when no sandbox has the session's name any more (never
    /// made, or deleted).
    async fn follow(
        &mut self,
        start: FollowStart,
        out: &mut (dyn for<'b> FnMut(&'b [u8]) -> std::io::Result<()> + Send),
        note: &mut (dyn for<'b> FnMut(&'b str) + Send),
    ) -> anyhow::Result<()> {
        let mut said_asleep = false;
        let mut failures = 0u32;
        loop {
            let Some(info) = self.find().await? else {
                return Ok(());
            };
            if info.status != SandboxStatus::Running {
                if !said_asleep {
                    note(&format!(
                        "sandbox {} is {}; waiting for it to run again (following does not wake it)",
                        self.name, info.status
                    ));
                    said_asleep = true;
                }
                tokio::time::sleep(POLL).await;
                continue;
            }
            said_asleep = false;
            let offset = match &self.position {
                Some((id, offset)) if *id == info.sandbox_id => Some(From::Offset(*offset)),
                // Another sandbox (the session came back in a new one): what
                // it holds may repeat what was printed.
                Some(_) => None,
                None => match start {
                    FollowStart::Beginning => Some(From::Offset(0)),
                    FollowStart::LastLines(n) => Some(From::LastLines(n)),
                },
            };
            let dp = self
                .client
                .sandbox(&info.sandbox_id, info.sandbox_url.as_deref())?;
            self.remove_stale(&info.sandbox_id, &dp).await;
            match self.attach(&dp, &info.sandbox_id, offset, out).await {
                Ok(()) => failures = 0,
                Err(e) => {
                    failures += 1;
                    if failures == 3 {
                        note(&format!(
                            "attaching to sandbox {} failed: {e:#}; retrying",
                            self.name
                        ));
                    }
                }
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

/// The offset line and what follows it, once the line is complete.
fn split_preamble(head: &[u8]) -> Option<(u64, &[u8])> {
    let start = head
        .windows(OFFSET_PREFIX.len())
        .position(|w| w == OFFSET_PREFIX)?;
    let after = &head[start + OFFSET_PREFIX.len()..];
    let end = after.iter().position(|b| *b == b'\n')?;
    let digits = String::from_utf8_lossy(&after[..end]);
    let offset = digits.trim().parse().unwrap_or(0);
    Some((offset, &after[end + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_preamble_gives_the_offset_and_leaves_the_output() {
        assert_eq!(split_preamble(b"garrison-off"), None);
        assert_eq!(split_preamble(b"garrison-offset 12"), None);
        assert_eq!(
            split_preamble(b"garrison-offset 12\nhello\n"),
            Some((12, &b"hello\n"[..]))
        );
        // A terminal may put its own bytes first; a carriage return is
        // tolerated.
        assert_eq!(
            split_preamble(b"\x1b[?2004lgarrison-offset 0\r\nx"),
            Some((0, &b"x"[..]))
        );
    }
}
