//! `garrison connect --manual`: an existing token, typed without echo (or
//! piped on stdin), checked against the API before it is saved, for hosts
//! without a browser.
//!
//! A serving token usually has only the machine scope, and reading an
//! outpost needs the orchestrator scope (Devin's reference: "Create, get,
//! and delete require the orchestrator scope"). So the token is checked
//! with the call it is for, a read of the queue filtered by the outpost;
//! the outpost itself is read only when the token may (a 403 there falls
//! back to the queue's answer).

use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;

use anyhow::{Context, anyhow, bail};
use fleet::{ClientOptions, FleetClient, FleetError, ListQuery, Secret};
use orchestrator::settings::Credentials;

use super::{ConnectArgs, print_saved, save};
use crate::format::printable;

pub(super) async fn manual(args: &ConnectArgs, api_url: &str, path: &Path) -> anyhow::Result<()> {
    let interactive = std::io::stdin().is_terminal();
    let outpost = match &args.outpost {
        Some(id) => Some(id.trim().to_owned()).filter(|id| !id.is_empty()),
        None if interactive => {
            tokio::task::spawn_blocking(|| prompt_line("Outpost id (empty for none): ")).await??
        }
        None => None,
    };
    let token = tokio::task::spawn_blocking(move || read_token(interactive)).await??;

    let client = FleetClient::new(api_url, token.clone(), ClientOptions::default())
        .map_err(|e| anyhow!("{e}"))?;
    let queue = match &outpost {
        Some(id) => ListQuery::new(id.as_str()),
        None => ListQuery::account(),
    };
    let page = match client.list_page(&queue.first(1)).await {
        Ok(page) => page,
        Err(e) => return Err(verify_error(e, api_url)),
    };
    let mut warning = None;
    let verified = match &outpost {
        Some(id) => match client.get_outpost(id).await {
            Ok(Some(o)) => format!(
                "outpost {} ({}, {})",
                printable(&o.metadata.outpost_id),
                printable(&o.spec.name),
                o.spec.platform
            ),
            Ok(None) => bail!(
                "no such outpost: {} at {api_url}; nothing was saved. \
                 `garrison outposts list` shows the outposts the token can see",
                printable(id)
            ),
            Err(FleetError::Forbidden { .. }) => {
                if page.items.is_empty() {
                    warning = Some(format!(
                        "Warning: outpost {} could not be confirmed. The token lacks the \
                         account.outposts.orchestrator scope that reading an outpost needs \
                         (`garrison serve` does not need it), and its queue is empty, which \
                         is what an idle outpost and an unknown one both look like. If the \
                         id is mistyped, `garrison serve` will wait on an empty queue: \
                         compare it with Devin's Settings -> Environment -> Outposts.",
                        printable(id)
                    ));
                }
                format!(
                    "outpost {}'s queue answered ({} entr{} on the first page)",
                    printable(id),
                    page.items.len(),
                    if page.items.len() == 1 { "y" } else { "ies" }
                )
            }
            Err(e) => return Err(verify_error(e, api_url)),
        },
        None => "the account's queue answered".to_owned(),
    };
    let credentials = Credentials {
        api_url: api_url.to_owned(),
        outpost_id: outpost.clone(),
        token,
    };
    save(path, &credentials)?;
    println!("The token works at {api_url}: {verified}.");
    if let Some(warning) = warning {
        eprintln!("{warning}");
    }
    if outpost.is_none() {
        println!(
            "No outpost was saved: pass --outpost to `garrison serve`, or run \
             `garrison connect --manual --outpost ID` again."
        );
    }
    print_saved(path);
    Ok(())
}

fn verify_error(error: FleetError, api_url: &str) -> anyhow::Error {
    let what = match &error {
        FleetError::Unauthorized { .. } => {
            "the token was rejected (401): check that it was copied whole and is not revoked"
                .to_owned()
        }
        FleetError::Forbidden { scope_hint, .. } => format!(
            "the token was refused reading the queue (403): it lacks the {scope_hint} scope; \
             use a service-user token whose role has \"Use outpost machine\""
        ),
        other => format!("cannot check the token at {api_url}: {other}"),
    };
    anyhow!("{what}; nothing was saved")
}

/// The token: without echo from the terminal, else one line of stdin.
fn read_token(interactive: bool) -> anyhow::Result<Secret> {
    let raw = if interactive {
        rpassword::prompt_password("Devin token (input hidden): ")
            .context("cannot read the token from the terminal")?
    } else {
        let mut line = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut line)
            .context("cannot read the token from stdin")?;
        line
    };
    let token = raw.trim();
    if token.is_empty() {
        bail!("no token given; nothing was saved");
    }
    if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        bail!("the token contains whitespace or control characters (value not shown)");
    }
    Ok(Secret::new(token))
}

fn prompt_line(prompt: &str) -> anyhow::Result<Option<String>> {
    let mut err = std::io::stderr().lock();
    write!(err, "{prompt}")?;
    err.flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    Ok(Some(line.trim().to_owned()).filter(|l| !l.is_empty()))
}
