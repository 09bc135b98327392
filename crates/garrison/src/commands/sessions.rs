//! `garrison sessions`: the sessions this Garrison holds and held.

use clap::Args;
use orchestrator::api::SessionSummary;

use crate::format::{age, bytes, is_done, now_ms, printable, table};
use crate::output;
use crate::store_fallback::{SourceArgs, should_fall_back};

/// Done sessions shown without `--all`.
const RECENT_DONE: usize = 20;

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  garrison sessions\n  garrison sessions --all --json | jq '.[] | select(.stage == \"failed\")'\n  \
    garrison sessions --state-dir /srv/garrison   # read the state when the daemon is down"
)]
pub(crate) struct SessionsArgs {
    #[command(flatten)]
    pub source: SourceArgs,

    /// Print the rows as a JSON array (the admin API's `SessionSummary`)
    ///
    /// Each row: session_id, outpost_id, kind, backend, stage,
    /// claimed_at_ms, running_at_ms and updated_at_ms (Unix milliseconds,
    /// running_at_ms null until it ran), restarts, cpus, memory_mb,
    /// disk_mb, snapshot_bytes and error (each null when not known).
    #[arg(long)]
    pub json: bool,

    /// Include every done session (default: active ones and the last 20
    /// done).
    #[arg(long)]
    pub all: bool,
}

pub(crate) async fn run(args: SessionsArgs) -> anyhow::Result<()> {
    let admin = args.source.admin_client()?;
    let rows = match admin.sessions().await {
        Ok(rows) => rows,
        Err(e) if should_fall_back(&e) => {
            let local = args.source.local_instead_of(&admin, &e)?;
            local.sessions()?
        }
        Err(e) => return Err(anyhow::anyhow!("the daemon at {}: {e}", admin.base())),
    };
    let rows = select(rows, args.all);
    if args.json {
        output::json(&rows)?;
    } else if rows.is_empty() {
        output::println("no sessions")?;
    } else {
        output::print(&render(&rows, now_ms()))?;
    }
    Ok(())
}

/// Active sessions and the newest done ones (rows come newest claim first).
pub(crate) fn select(mut rows: Vec<SessionSummary>, all: bool) -> Vec<SessionSummary> {
    rows.sort_by(|a, b| {
        b.claimed_at_ms
            .cmp(&a.claimed_at_ms)
            .then_with(|| a.session_id.cmp(&b.session_id))
    });
    if all {
        return rows;
    }
    let mut done = 0;
    rows.retain(|r| {
        if !is_done(&r.stage) {
            return true;
        }
        done += 1;
        done <= RECENT_DONE
    });
    rows
}

pub(crate) fn render(rows: &[SessionSummary], now: i64) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let sizing = match (r.cpus, r.memory_mb) {
                (None, None) => "-".to_owned(),
                (cpus, mem) => format!(
                    "{}/{}",
                    cpus.map(|c| format!("{c}")).unwrap_or_else(|| "-".into()),
                    mem.map(|m| format!("{}G", trim_float(m as f64 / 1024.0)))
                        .unwrap_or_else(|| "-".into())
                ),
            };
            vec![
                printable(&r.session_id),
                printable(&r.outpost_id),
                printable(&r.stage),
                age(now - r.claimed_at_ms),
                printable(&r.backend),
                sizing,
                r.snapshot_bytes.map(bytes).unwrap_or_else(|| "-".into()),
                r.restarts.to_string(),
            ]
        })
        .collect();
    table(
        &[
            "SESSION", "OUTPOST", "STAGE", "AGE", "BACKEND", "CPUS/MEM", "SNAPSHOT", "RESTARTS",
        ],
        &cells,
    )
}

fn trim_float(v: f64) -> String {
    let text = format!("{v:.1}");
    text.strip_suffix(".0").map(str::to_owned).unwrap_or(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, stage: &str, claimed: i64) -> SessionSummary {
        SessionSummary {
            session_id: id.into(),
            outpost_id: "o".into(),
            kind: "new".into(),
            backend: "host".into(),
            stage: stage.into(),
            claimed_at_ms: claimed,
            running_at_ms: None,
            updated_at_ms: claimed,
            restarts: 0,
            cpus: None,
            memory_mb: None,
            disk_mb: None,
            snapshot_bytes: None,
            error: None,
        }
    }

    #[test]
    fn by_default_active_sessions_and_the_last_twenty_done_are_shown() {
        let mut rows: Vec<SessionSummary> = (0..30)
            .map(|i| row(&format!("done-{i:02}"), "terminated", i))
            .collect();
        rows.push(row("old-but-running", "running", -1));
        rows.push(row("asleep", "suspended", 100));
        let shown = select(rows.clone(), false);
        assert_eq!(shown.len(), 21);
        assert_eq!(shown[0].session_id, "asleep");
        assert!(shown.iter().any(|r| r.session_id == "old-but-running"));
        assert!(!shown.iter().any(|r| r.session_id == "done-00"));
        assert_eq!(select(rows, true).len(), 32);
    }

    #[test]
    fn rows_render_with_sizing_and_snapshot() {
        let mut r = row("devin-1", "running", 0);
        r.cpus = Some(2.0);
        r.memory_mb = Some(8192);
        r.snapshot_bytes = Some(1_500_000);
        r.restarts = 1;
        assert_eq!(
            render(&[r], 125_000),
            "SESSION  OUTPOST  STAGE    AGE  BACKEND  CPUS/MEM  SNAPSHOT  RESTARTS\n\
             devin-1  o        running  2m   host     2/8G      1.5 MB    1\n"
        );
    }
}
