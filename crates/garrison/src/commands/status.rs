//! `garrison status`: the daemon's health, its outposts and sessions by
//! stage.

use std::collections::BTreeMap;

use clap::Args;
use orchestrator::api::{OutpostView, StatusView};

use crate::exit::Code;
use crate::format::{age, now_ms, printable, table};
use crate::output;
use crate::store_fallback::{Local, SourceArgs, should_fall_back};

/// The daemon answered and is not ready.
pub(crate) const NOT_READY: u8 = 1;
/// Nothing answered at `--admin` (the state store is read instead).
pub(crate) const NOT_REACHABLE: u8 = 2;

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  garrison status\n  garrison status --json\n  \
    garrison status --admin http://10.0.0.5:9180\n  garrison status --state-dir /srv/garrison   # read the state when the daemon is down\n  \
    garrison status >/dev/null; echo $?   # 0 ready, 1 not ready, 2 not reachable"
)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    pub source: SourceArgs,

    /// Print the status as one JSON object (the admin API's `/api/status`)
    ///
    /// Its fields: acceptor_id, version, started_at_ms (Unix
    /// milliseconds), ready, not_ready (why not; absent when ready), counts
    /// (sessions by stage) and outposts, each with outpost_id, backend,
    /// max_concurrent, queue_synced_at_ms, watch_reconnects, pending and
    /// held. From the state store (daemon not reachable): the same fields,
    /// with ready false and version empty.
    #[arg(long)]
    pub json: bool,
}

/// Prints the status; the exit code says ready (0), not ready (1) or not
/// reachable (2).
pub(crate) async fn run(args: StatusArgs) -> anyhow::Result<()> {
    let admin = args.source.admin_client()?;
    match admin.status().await {
        Ok(view) => {
            if args.json {
                output::json(&view)?;
            } else {
                output::print(&render_live(&view, now_ms()))?;
            }
            if view.ready {
                Ok(())
            } else {
                Err(Code::<NOT_READY>.into())
            }
        }
        Err(e) if should_fall_back(&e) => {
            let stored = args
                .source
                .local_instead_of(&admin, &e)
                .and_then(|local| from_store(&local, admin.base()));
            let view = match stored {
                Ok(view) => view,
                Err(error) => {
                    // Not reachable still, and said so with the reason.
                    eprintln!("Error: {error:#}");
                    return Err(Code::<NOT_REACHABLE>.into());
                }
            };
            if args.json {
                output::json(&view)?;
            } else {
                output::print(&render_stored(&view))?;
            }
            Err(Code::<NOT_REACHABLE>.into())
        }
        Err(e) => Err(anyhow::anyhow!("the daemon at {}: {e}", admin.base())),
    }
}

fn counts_line(counts: &BTreeMap<String, u64>) -> String {
    if counts.is_empty() {
        return "sessions: none yet".to_owned();
    }
    let parts: Vec<String> = counts.iter().map(|(k, n)| format!("{k} {n}")).collect();
    format!("sessions: {}", parts.join(", "))
}

pub(crate) fn render_live(view: &StatusView, now: i64) -> String {
    let mut out = format!(
        "garrison {} {}, acceptor {}, up {}\n",
        printable(&view.version),
        if view.ready { "ready" } else { "NOT READY" },
        printable(&view.acceptor_id),
        age(now - view.started_at_ms),
    );
    if let Some(why) = view.not_ready.as_deref().filter(|_| !view.ready) {
        out.push_str(&format!("not ready: {}\n", printable(why)));
    }
    out.push('\n');
    out.push_str(&outposts_table(&view.outposts, Some(now)));
    out.push('\n');
    out.push_str(&counts_line(&view.counts));
    out.push('\n');
    out
}

fn outposts_table(outposts: &[OutpostView], now: Option<i64>) -> String {
    let rows: Vec<Vec<String>> = outposts
        .iter()
        .map(|o| {
            let synced = match now {
                None => "-".to_owned(),
                Some(_) if o.queue_synced_at_ms == 0 => "never".to_owned(),
                Some(now) => format!("{} ago", age(now - o.queue_synced_at_ms)),
            };
            let max = if o.max_concurrent == 0 {
                "-".to_owned()
            } else {
                o.max_concurrent.to_string()
            };
            let pending = if now.is_some() {
                o.pending.to_string()
            } else {
                "-".to_owned()
            };
            vec![
                printable(&o.outpost_id),
                printable(&o.backend),
                pending,
                o.held.to_string(),
                max,
                synced,
            ]
        })
        .collect();
    if rows.is_empty() {
        return "no outposts\n".to_owned();
    }
    table(
        &["OUTPOST", "BACKEND", "PENDING", "HELD", "MAX", "LAST SYNC"],
        &rows,
    )
}

/// What the state store knows: no health, no queue; outposts are the ones
/// sessions were recorded for.
fn from_store(local: &Local, admin: &str) -> anyhow::Result<StatusView> {
    let records = local.store.sessions()?;
    let mut outposts: BTreeMap<String, OutpostView> = BTreeMap::new();
    // Newest claim first: the first backend seen is the latest.
    for rec in &records {
        let view = outposts
            .entry(rec.outpost_id.clone())
            .or_insert_with(|| OutpostView {
                outpost_id: rec.outpost_id.clone(),
                backend: rec.backend.clone(),
                max_concurrent: 0,
                queue_synced_at_ms: 0,
                watch_reconnects: 0,
                pending: 0,
                held: 0,
            });
        if !rec.stage.is_done() {
            view.held += 1;
        }
    }
    Ok(StatusView {
        acceptor_id: local.store.meta("acceptor_id")?.unwrap_or_default(),
        version: String::new(),
        started_at_ms: 0,
        ready: false,
        not_ready: Some(format!(
            "no daemon answered at {admin}; this is what its state store holds"
        )),
        outposts: outposts.into_values().collect(),
        counts: local.store.count_by_stage()?.into_iter().collect(),
    })
}

fn render_stored(view: &StatusView) -> String {
    let acceptor = if view.acceptor_id.is_empty() {
        "none recorded".to_owned()
    } else {
        printable(&view.acceptor_id)
    };
    let mut out =
        format!("garrison daemon not reachable; acceptor {acceptor} (from the state store)\n\n");
    out.push_str(&outposts_table(&view.outposts, None));
    out.push('\n');
    out.push_str(&counts_line(&view.counts));
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_status_reads_as_one_screen() {
        let view = StatusView {
            acceptor_id: "garrison-h-1".into(),
            version: "0.1.0".into(),
            started_at_ms: 1_000,
            ready: true,
            not_ready: None,
            outposts: vec![OutpostView {
                outpost_id: "outpost_env-a".into(),
                backend: "host".into(),
                max_concurrent: 5,
                queue_synced_at_ms: 61_000,
                watch_reconnects: 0,
                pending: 2,
                held: 1,
            }],
            counts: [("running".to_owned(), 1), ("terminated".to_owned(), 3)]
                .into_iter()
                .collect(),
        };
        let text = render_live(&view, 63_000);
        assert_eq!(
            text,
            "garrison 0.1.0 ready, acceptor garrison-h-1, up 1m\n\n\
             OUTPOST        BACKEND  PENDING  HELD  MAX  LAST SYNC\n\
             outpost_env-a  host     2        1     5    2s ago\n\n\
             sessions: running 1, terminated 3\n"
        );
    }

    #[test]
    fn a_daemon_that_is_not_ready_says_why() {
        let view = StatusView {
            acceptor_id: "a".into(),
            version: "0.1.0".into(),
            started_at_ms: 0,
            ready: false,
            not_ready: Some("outpost o: the fleet API refused the token (401)".into()),
            outposts: vec![],
            counts: Default::default(),
        };
        let text = render_live(&view, 1_000);
        assert!(
            text.starts_with(
                "garrison 0.1.0 NOT READY, acceptor a, up 1s\n\
                 not ready: outpost o: the fleet API refused the token (401)\n"
            ),
            "{text}"
        );
    }
}
