//! The `--policy` figures of `garrison bench sandbox` (local backend):
//!
//! 1. **Start latency** with an enabled policy of [`ALLOW_ENTRIES`] allow
//!    entries against a disabled one: create -> remote started, as the
//!    headline measures it, one sandbox at a time, alternating the two
//!    policies so drift of the machine hits both alike; each sandbox is
//!    destroyed before the next. This runs on the bench's backend in the
//!    host's own network namespace; nothing resolves or dials out.
//! 2. **Throughput** of one TCP stream out of a sandbox through its link, with
//!    the policy disabled and enabled (two sandboxes; the destination inside
//!    an allowed CIDR), alternating, in a private world of namespaces
//!    (see `world`), so no packet can reach anything but a sink this bench
//!    starts.

mod rules;
mod world;

use std::fmt::Write as _;

use anyhow::Context;
use fleet::NetworkPolicy;
use serde_json::{Value, json};

use super::figures::header;
use super::phases::Bench;
use crate::report::{Summary, round, row, verdict};

use self::rules::{ALLOW_ENTRIES, enabled};
pub(super) use self::world::{Transfer, WorldSetup, measure_throughput};

/// An allowed stream keeps at least this share of an unrestricted one.
pub(super) const TARGET_THROUGHPUT_RATIO: f64 = 0.90;

/// Both `--policy` figures.
#[derive(Clone, Debug, Default)]
pub(super) struct PolicyFigures {
    /// Create -> remote started, ms, policy disabled.
    pub start_disabled: Summary,
    /// The same with [`enabled`].
    pub start_enabled: Summary,
    /// `create` alone, ms, each way (the policy is applied inside it).
    pub create_disabled: Summary,
    pub create_enabled: Summary,
    pub transfer: Transfer,
}

/// Creates `n` sandboxes with each policy, alternating, each destroyed
/// before the next; fills the start figures.
pub(super) async fn start_latency(
    base: &Bench,
    n: usize,
    binary: &[u8],
) -> anyhow::Result<PolicyFigures> {
    let mut total: [Vec<f64>; 2] = Default::default();
    let mut create: [Vec<f64>; 2] = Default::default();
    for i in 0..n {
        for (k, policy) in [NetworkPolicy::default(), enabled()]
            .into_iter()
            .enumerate()
        {
            let bench = Bench {
                backend: base.backend.clone(),
                resources: base.resources,
                image: base.image.clone(),
                run_id: format!("{}-p{i}{k}", base.run_id),
                policy,
            };
            let (lifecycle, handles) = bench.create_and_start(1, binary).await?;
            total[k].push(lifecycle.total.p50);
            create[k].push(lifecycle.create.p50);
            for handle in &handles {
                bench.backend.destroy(handle).await.context("destroy")?;
            }
        }
    }
    Ok(PolicyFigures {
        start_disabled: Summary::of(&total[0]),
        start_enabled: Summary::of(&total[1]),
        create_disabled: Summary::of(&create[0]),
        create_enabled: Summary::of(&create[1]),
        transfer: Transfer::default(),
    })
}

impl PolicyFigures {
    /// What the enabled policy adds to a start, p50 and p99, ms.
    pub(super) fn extra_ms(&self) -> (f64, f64) {
        (
            self.start_enabled.p50 - self.start_disabled.p50,
            self.start_enabled.p99 - self.start_disabled.p99,
        )
    }

    pub(super) fn throughput_ok(&self) -> bool {
        self.transfer.ratio() >= TARGET_THROUGHPUT_RATIO
    }

    pub(super) fn table(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "network policy: disabled vs enabled with {ALLOW_ENTRIES} allow entries \
             (25 *.example-N.test, 25 TEST-NET networks)"
        );
        header(out, "  create -> remote started (ms)");
        row(out, "    policy disabled", &self.start_disabled);
        row(out, "    policy enabled", &self.start_enabled);
        row(out, "    create alone, disabled", &self.create_disabled);
        row(out, "    create alone, enabled", &self.create_enabled);
        let (p50, p99) = self.extra_ms();
        let _ = writeln!(
            out,
            "  extra start latency: p50 {p50:+.1} ms, p99 {p99:+.1} ms"
        );
        let t = &self.transfer;
        let _ = writeln!(
            out,
            "  one TCP stream of {:.0} MB out of a sandbox, policy disabled vs enabled, to a sink in a private namespace (MB/s, receiver side)",
            t.bytes as f64 / 1e6
        );
        let _ = writeln!(
            out,
            "{:<48} {:>10} {:>10} {:>10} {:>10} {:>5}",
            "", "p50", "min", "mean", "max", "n"
        );
        for (label, s) in [
            ("    unrestricted (policy disabled)", &t.unrestricted),
            ("    allowed (policy enabled, CIDR entry)", &t.allowed),
        ] {
            let min = s.iter().copied().fold(f64::INFINITY, f64::min);
            let sum = Summary::of(s);
            let _ = writeln!(
                out,
                "{label:<48} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>5}",
                sum.p50,
                if s.is_empty() { 0.0 } else { min },
                sum.mean,
                sum.max,
                sum.n
            );
        }
        let _ = writeln!(
            out,
            "  allowed / unrestricted {:.3} (median of back-to-back pairs)   target >= {TARGET_THROUGHPUT_RATIO} (at most 10 % slower)   {}",
            t.ratio(),
            verdict(self.throughput_ok())
        );
    }

    pub(super) fn json(&self) -> Value {
        let (p50, p99) = self.extra_ms();
        let t = &self.transfer;
        json!({
            "allow_entries": ALLOW_ENTRIES,
            "start_ms": {
                "disabled": self.start_disabled.json(),
                "enabled": self.start_enabled.json(),
                "extra_p50": round(p50),
                "extra_p99": round(p99),
            },
            "create_ms": {
                "disabled": self.create_disabled.json(),
                "enabled": self.create_enabled.json(),
            },
            "throughput": {
                "bytes": t.bytes,
                "unrestricted_mb_per_s": t.unrestricted.iter().map(|v| round(*v)).collect::<Vec<_>>(),
                "allowed_mb_per_s": t.allowed.iter().map(|v| round(*v)).collect::<Vec<_>>(),
                "unrestricted_p50": round(Summary::of(&t.unrestricted).p50),
                "allowed_p50": round(Summary::of(&t.allowed).p50),
                "ratio": round(t.ratio()),
            },
        })
    }

    /// The entry for the report's `targets` object.
    pub(super) fn target_json(&self) -> Value {
        json!({
            "target": TARGET_THROUGHPUT_RATIO,
            "value": round(self.transfer.ratio()),
            "pass": self.throughput_ok(),
        })
    }
}

#[cfg(test)]
mod tests {
    use fleet::AllowRule;

    use super::rules::allow_list;
    use super::*;

    #[test]
    fn the_allow_list_has_50_test_entries_and_covers_the_sink() {
        let rules = allow_list();
        assert_eq!(rules.len(), ALLOW_ENTRIES);
        let hosts = rules
            .iter()
            .filter(|r| matches!(r, AllowRule::Hostname(h) if h.ends_with(".test")))
            .count();
        assert_eq!(hosts, 25);
        for r in &rules {
            if let AllowRule::Ipv4(net) = r {
                assert!(
                    net.starts_with("198.51.100.") || net.starts_with("203.0.113."),
                    "{net}"
                );
            }
        }
        // The sink (198.51.100.200) is in 198.51.100.192/28.
        assert!(rules.contains(&AllowRule::Ipv4("198.51.100.192/28".into())));
        assert_eq!(world::SINK.to_string(), "198.51.100.200");
    }
}
