//! Checks against the fleet API: is the token accepted, does it carry the
//! scope `garrison serve` needs, does the outpost exist, and is this
//! machine's clock close to the API's.
//!
//! A serving token usually has only the machine scope, which reads the
//! queue; reading an outpost needs the orchestrator scope (Devin's
//! reference: "Create, get, and delete require the orchestrator scope").
//! So the token is checked with a queue read, each outpost with `GET` when
//! the token may (a 403 falls back to its filtered queue), and where a
//! machine token cannot tell an unknown outpost from an idle one, the line
//! says so instead of failing.

use std::time::{Duration, SystemTime};

use fleet::{FleetClient, FleetError, ListQuery, Platform, Secret};

use super::check::Check;

/// Beyond this the clock is a warning: claim deadlines and token expiry are
/// the server's times, compared with ours.
pub(super) const MAX_SKEW: Duration = Duration::from_secs(30);

const MACHINE_SCOPE: &str = "account.outposts.machine";
const ORCHESTRATOR_SCOPE: &str = "account.outposts.orchestrator";

/// Token validity and scopes, the outposts, and the clock, in that order.
/// Later checks are skipped (with a line saying so) when the token is
/// refused, since they could only fail the same way.
pub(super) async fn checks(
    client: &FleetClient,
    api_url: &str,
    token: &Secret,
    outposts: &[String],
) -> Vec<Check> {
    let mut out = Vec::new();
    // The account's queue, unfiltered (`outpost` is only a filter): the
    // call the machine scope allows, whatever outposts are configured.
    let queue = client.list_page(&ListQuery::account().first(1)).await;
    let valid = match &queue {
        Ok(_) => {
            out.push(Check::pass("token valid", "reading the queue answered"));
            out.push(Check::pass(
                format!("scope {MACHINE_SCOPE}"),
                "reading the queue answered",
            ));
            true
        }
        Err(FleetError::Unauthorized { .. }) => {
            out.push(Check::fail(
                "token valid",
                "the API refused the token (401): it is wrong, expired or revoked",
                "get a new one with `garrison connect` (or set DEVIN_OUTPOSTS_TOKEN)",
            ));
            false
        }
        Err(FleetError::Forbidden { .. }) => {
            out.push(Check::pass(
                "token valid",
                "the API knows it (403, not 401)",
            ));
            out.push(Check::fail(
                format!("scope {MACHINE_SCOPE}"),
                format!("reading the queue was refused (403): the token lacks {MACHINE_SCOPE}"),
                format!(
                    "use a service-user token with the {MACHINE_SCOPE} scope (role \"Use outpost \
                     machine\"; `garrison connect` gets one)"
                ),
            ));
            false
        }
        Err(e) => {
            out.push(Check::fail(
                "token valid",
                format!("the API did not answer: {e}"),
                format!("check the API URL ({api_url}) and this machine's network"),
            ));
            false
        }
    };
    if !valid {
        out.push(Check::info(
            "outpost and scopes",
            "not checked: the token cannot read the queue",
        ));
        out.push(clock(api_url, token).await);
        return out;
    }

    let mut orchestrator = None;
    for outpost in outposts {
        let (check, has_orchestrator) = outpost_check(client, outpost).await;
        out.push(check);
        orchestrator = orchestrator.or(has_orchestrator);
    }
    if outposts.is_empty() {
        out.push(Check::fail(
            "outpost",
            "none configured",
            "pass --outpost, set OUTPOST_ID, add an [[outpost]] table, or run `garrison connect`",
        ));
    }
    out.push(match orchestrator {
        Some(true) => Check::pass(
            format!("scope {ORCHESTRATOR_SCOPE}"),
            "reading an outpost answered (`garrison serve` does not need it)",
        )
        .optional(),
        Some(false) => Check::info(
            format!("scope {ORCHESTRATOR_SCOPE}"),
            "absent (reading an outpost answered 403); `garrison serve` does not need it, \
             `garrison outposts create/delete` do",
        )
        .optional(),
        None => Check::info(
            format!("scope {ORCHESTRATOR_SCOPE}"),
            "not tested: no outpost to read; `garrison outposts create` needs it, \
             `garrison serve` does not",
        )
        .optional(),
    });
    out.push(clock(api_url, token).await);
    out
}

/// One outpost: `GET` on it when the token may, else its filtered queue.
/// Also says whether the token has the orchestrator scope (`None`: the
/// answer did not tell).
async fn outpost_check(client: &FleetClient, outpost: &str) -> (Check, Option<bool>) {
    let name = format!("outpost {outpost}");
    match client.get_outpost(outpost).await {
        Ok(Some(o)) if o.spec.platform == Platform::Linux => (
            Check::pass(name, format!("exists ({:?}), platform linux", o.spec.name)),
            Some(true),
        ),
        Ok(Some(o)) => (
            Check::fail(
                name,
                format!("its platform is {:?}, not linux", o.spec.platform),
                "Garrison serves linux outposts: create one with `garrison outposts create NAME`",
            ),
            Some(true),
        ),
        Ok(None) => (
            Check::fail(
                name,
                "does not exist for this token's account",
                "list them with `garrison outposts list`, or create one with `garrison outposts create`",
            ),
            Some(true),
        ),
        Err(FleetError::Forbidden { .. }) => {
            (queue_check(client, outpost, name).await, Some(false))
        }
        Err(e) => (
            Check::fail(
                name,
                format!("could not be read: {e}"),
                "check the outpost id and the API URL",
            ),
            None,
        ),
    }
}

/// A machine token's view of an outpost: its filtered queue. Entries prove
/// the outpost; an empty queue is what an idle outpost and an unknown one
/// both look like, so that is a warning naming the outpost, not a failure.
async fn queue_check(client: &FleetClient, outpost: &str, name: String) -> Check {
    match client.list_page(&ListQuery::new(outpost).first(1)).await {
        Ok(page) if !page.items.is_empty() => Check::pass(
            name,
            "its queue has entries (read through the queue: the token cannot read outposts)",
        ),
        Ok(_) => Check::warn(
            name,
            format!(
                "not confirmed: its queue is empty, and without {ORCHESTRATOR_SCOPE} an \
                 unknown outpost looks the same as an idle one"
            ),
            format!(
                "compare {outpost} with Devin's Settings -> Environment -> Outposts, or run \
                 doctor with a token that has {ORCHESTRATOR_SCOPE}"
            ),
        ),
        Err(FleetError::NotFound { .. }) => Check::fail(
            name,
            "the API does not know it (404 on its queue)",
            "list them with `garrison outposts list`, or create one with `garrison outposts create`",
        ),
        Err(e) => Check::fail(
            name,
            format!("reading its queue failed: {e}"),
            "check the outpost id and the API URL",
        ),
    }
}

/// Compares this machine's clock with the `Date` header of an API answer.
/// The header has whole seconds, and the local time is taken halfway
/// through the request, so the figure is good to about a second.
async fn clock(api_url: &str, token: &Secret) -> Check {
    let name = "clock";
    let client = match reqwest::Client::builder()
        .timeout(Duration::from_secs(15))
        .build()
    {
        Ok(c) => c,
        Err(e) => return Check::info(name, format!("not checked: {e}")),
    };
    let sent = SystemTime::now();
    let response = client
        .get(format!("{api_url}/opbeta/outposts?first=1"))
        .bearer_auth(token.expose())
        .send()
        .await;
    let received = SystemTime::now();
    let response = match response {
        Ok(r) => r,
        Err(e) => return Check::info(name, format!("not checked: the API did not answer ({e})")),
    };
    let Some(date) = response
        .headers()
        .get(reqwest::header::DATE)
        .and_then(|d| d.to_str().ok())
        .and_then(|d| chrono::DateTime::parse_from_rfc2822(d).ok())
    else {
        return Check::info(name, "not checked: the API's answer has no Date header");
    };
    let local = sent + received.duration_since(sent).unwrap_or_default() / 2;
    let local_ms = local
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let skew_ms = local_ms - date.timestamp_millis();
    describe_skew(skew_ms)
}

/// The clock check's line for a measured skew (positive: ours is ahead).
/// The `Date` header truncates to the second, hence the extra second of
/// tolerance in what is called "in sync".
pub(super) fn describe_skew(skew_ms: i64) -> Check {
    let secs = skew_ms as f64 / 1000.0;
    let direction = if skew_ms >= 0 { "ahead of" } else { "behind" };
    if skew_ms.unsigned_abs() > MAX_SKEW.as_millis() as u64 {
        Check::warn(
            "clock",
            format!("{:.0} s {direction} the API's clock", secs.abs()),
            "synchronise the clock (e.g. systemd-timesyncd or chrony): claims and tokens expire by the server's time",
        )
    } else {
        Check::pass(
            "clock",
            format!(
                "within {:.0} s of the API's clock (limit {} s)",
                secs.abs().max(1.0),
                MAX_SKEW.as_secs()
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::doctor::check::Outcome;

    #[test]
    fn skew_beyond_the_limit_is_a_warning_either_way() {
        assert_eq!(describe_skew(400).outcome, Outcome::Pass);
        assert_eq!(describe_skew(-29_000).outcome, Outcome::Pass);
        let ahead = describe_skew(95_000);
        assert_eq!(ahead.outcome, Outcome::Warn);
        assert!(ahead.detail.contains("95 s ahead of"), "{ahead}");
        assert!(describe_skew(-31_000).detail.contains("behind"));
        assert!(!ahead.is_blocking());
    }
}
