//! The runner's clock for its own timers: how long a `suspended` reading
//! has lasted, how long ago the remote stopped, when the end was last
//! confirmed. They are read on the monotonic clock, so a step of the wall
//! clock (`date -s`, an NTP step) neither cuts them short nor stretches
//! them; the claim's times are read onto it too (see
//! `ClaimKeeper::expires_at`). Its readings mean nothing outside this
//! process: records, events and the server's timestamps use the wall
//! clock (`now_ms`).

use std::sync::OnceLock;

use tokio::time::Instant;

use crate::planner::Millis;

/// The reading 0 (the first reading in this process).
static ORIGIN: OnceLock<Instant> = OnceLock::new();

/// Milliseconds on the monotonic clock since a fixed moment in this
/// process (negative before it: a test's paused clock may start earlier).
pub(crate) fn local_now() -> Millis {
    let origin = *ORIGIN.get_or_init(Instant::now);
    let now = Instant::now();
    if now >= origin {
        (now - origin).as_millis() as Millis
    } else {
        -((origin - now).as_millis() as Millis)
    }
}
