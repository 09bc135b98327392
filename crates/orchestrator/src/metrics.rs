//! Counters the executor bumps; exported by the admin listener.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Most recent latency samples kept per series (for percentiles).
const MAX_SAMPLES: usize = 4096;

#[derive(Default)]
pub struct Metrics {
    pub claims_won: AtomicU64,
    pub claims_lost: AtomicU64,
    pub claim_renewals: AtomicU64,
    pub remote_restarts: AtomicU64,
    pub remotes_started: AtomicU64,
    pub checksum_refusals: AtomicU64,
    pub snapshots_taken: AtomicU64,
    pub snapshot_bytes: AtomicU64,
    pub sessions_finished: AtomicU64,
    /// Entry created -> remote started, in milliseconds.
    queue_to_running_ms: Mutex<Vec<f64>>,
    /// Sandbox create call -> remote started, in milliseconds.
    sandbox_start_ms: Mutex<Vec<f64>>,
    snapshot_ms: Mutex<Vec<f64>>,
}

fn push(series: &Mutex<Vec<f64>>, value: f64) {
    let mut v = series.lock().unwrap_or_else(|p| p.into_inner());
    if v.len() == MAX_SAMPLES {
        v.remove(0);
    }
    v.push(value);
}

impl Metrics {
    pub fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn record_queue_to_running(&self, ms: f64) {
        push(&self.queue_to_running_ms, ms);
    }

    pub fn record_sandbox_start(&self, ms: f64) {
        push(&self.sandbox_start_ms, ms);
    }

    pub fn record_snapshot(&self, ms: f64, bytes: u64) {
        push(&self.snapshot_ms, ms);
        self.snapshot_bytes.fetch_add(bytes, Ordering::Relaxed);
        Self::inc(&self.snapshots_taken);
    }

    pub fn queue_to_running_samples(&self) -> Vec<f64> {
        self.queue_to_running_ms
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn sandbox_start_samples(&self) -> Vec<f64> {
        self.sandbox_start_ms
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn snapshot_samples(&self) -> Vec<f64> {
        self.snapshot_ms
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}
