//! Counters and histograms the executor bumps; exported by the admin
//! listener ([`crate::admin`]) in the Prometheus text format.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds (seconds) for queue-to-running and sandbox start latency.
pub(crate) const LATENCY_BUCKETS: &[f64] = &[
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];
/// Upper bounds (seconds) for snapshot duration.
pub(crate) const SNAPSHOT_BUCKETS: &[f64] = &[
    0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];

/// A fixed-bucket histogram of seconds (Prometheus style).
pub struct Histogram {
    bounds: &'static [f64],
    inner: Mutex<HistogramSnapshot>,
}

/// A histogram's state: per-bucket counts (not cumulative), sum and count.
#[derive(Clone, Debug, PartialEq)]
pub struct HistogramSnapshot {
    /// Upper bounds of the buckets.
    pub bounds: &'static [f64],
    /// `counts[i]` observations fell in `(bounds[i-1], bounds[i]]`; the last
    /// element (index `bounds.len()`) counts those above every bound.
    pub counts: Vec<u64>,
    /// The sum of the values.
    pub sum: f64,
    /// How many values.
    pub count: u64,
}

impl Histogram {
    /// A histogram with these bucket bounds.
    pub fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            inner: Mutex::new(HistogramSnapshot {
                bounds,
                counts: vec![0; bounds.len() + 1],
                sum: 0.0,
                count: 0,
            }),
        }
    }

    /// Counts `value`.
    pub fn observe(&self, value: f64) {
        if !value.is_finite() {
            return;
        }
        let idx = self
            .bounds
            .iter()
            .position(|b| value <= *b)
            .unwrap_or(self.bounds.len());
        let mut h = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        h.counts[idx] += 1;
        h.sum += value;
        h.count += 1;
    }

    /// The counts so far.
    pub fn snapshot(&self) -> HistogramSnapshot {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Garrison's counters and timings.
pub struct Metrics {
    /// Claims won.
    pub claims_won: AtomicU64,
    /// Claims lost to another acceptor.
    pub claims_lost: AtomicU64,
    /// Claims renewed.
    pub claim_renewals: AtomicU64,
    /// Remotes restarted.
    pub remote_restarts: AtomicU64,
    /// Remotes started.
    pub remotes_started: AtomicU64,
    /// Binaries refused for their checksum.
    pub checksum_refusals: AtomicU64,
    /// Snapshots taken.
    pub snapshots_taken: AtomicU64,
    /// Bytes snapshotted.
    pub snapshot_bytes: AtomicU64,
    /// Sessions finished.
    pub sessions_finished: AtomicU64,
    /// Entry created -> remote started, in seconds.
    pub queue_to_running: Histogram,
    /// Sandbox create call -> remote started, in seconds.
    pub sandbox_start: Histogram,
    /// Snapshot taken, in seconds.
    pub snapshot_duration: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            claims_won: AtomicU64::new(0),
            claims_lost: AtomicU64::new(0),
            claim_renewals: AtomicU64::new(0),
            remote_restarts: AtomicU64::new(0),
            remotes_started: AtomicU64::new(0),
            checksum_refusals: AtomicU64::new(0),
            snapshots_taken: AtomicU64::new(0),
            snapshot_bytes: AtomicU64::new(0),
            sessions_finished: AtomicU64::new(0),
            queue_to_running: Histogram::new(LATENCY_BUCKETS),
            sandbox_start: Histogram::new(LATENCY_BUCKETS),
            snapshot_duration: Histogram::new(SNAPSHOT_BUCKETS),
        }
    }
}

impl Metrics {
    /// Adds one to `counter`.
    pub fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// `counter`'s value.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// Times a session from queued to running.
    pub fn record_queue_to_running(&self, ms: f64) {
        self.queue_to_running.observe(ms / 1000.0);
    }

    /// Times a sandbox start.
    pub fn record_sandbox_start(&self, ms: f64) {
        self.sandbox_start.observe(ms / 1000.0);
    }

    /// Times a snapshot and counts its bytes.
    pub fn record_snapshot(&self, ms: f64, bytes: u64) {
        self.snapshot_duration.observe(ms / 1000.0);
        self.snapshot_bytes.fetch_add(bytes, Ordering::Relaxed);
        Self::inc(&self.snapshots_taken);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_by_upper_bound() {
        let m = Metrics::default();
        m.record_queue_to_running(50.0); // 0.05 s: on the first bound
        m.record_queue_to_running(700.0);
        m.record_queue_to_running(1_000_000.0); // above every bound
        let h = m.queue_to_running.snapshot();
        assert_eq!(h.count, 3);
        assert_eq!(h.counts[0], 1);
        assert_eq!(h.counts[4], 1); // (0.5, 1]
        assert_eq!(h.counts[LATENCY_BUCKETS.len()], 1);
        assert!((h.sum - 1000.75).abs() < 1e-9);
    }
}
