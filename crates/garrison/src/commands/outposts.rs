//! `garrison outposts list|create|delete`: outpost CRUD against the fleet
//! API, with the token from `DEVIN_OUTPOSTS_TOKEN` or the credentials file.

use anyhow::{Context, anyhow, bail};
use clap::{Args, Subcommand};
use fleet::{ClientOptions, CreateOutpost, FleetClient, FleetError, Outpost, Platform, Secret};
use orchestrator::settings::{self, TOKEN_ENV};

use crate::format::printable;
use crate::output;

const AFTER_HELP: &str = "\
Examples:
  garrison outposts list
  garrison outposts create lab-runners --platform linux --description \"GPU lab\"
  garrison outposts delete outpost_env-...

The token is read from DEVIN_OUTPOSTS_TOKEN, else from the credentials file
that `garrison connect` saves. Creating and deleting outposts needs the
account.outposts.orchestrator scope; listing needs account.outposts.machine.";

/// List, create and delete outposts.
#[derive(Args, Clone, Debug)]
#[command(after_help = AFTER_HELP)]
pub(crate) struct OutpostsArgs {
    #[command(subcommand)]
    pub command: OutpostsCommand,

    /// Devin API base, without /opbeta
    /// [default: the credentials file's, else https://api.devin.ai]
    #[arg(long, env = "DEVIN_API_URL", value_name = "URL", global = true)]
    pub api_url: Option<String>,

    /// Print JSON instead of text
    ///
    /// `list`: an array of the fleet API's outpost objects (metadata.outpost_id,
    /// spec.name, spec.platform, spec.description, status.queue_depth,
    /// status.active_claims, ...); `create`: the created one; `delete`:
    /// {"deleted": ID}.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Subcommand, Clone, Debug)]
pub(crate) enum OutpostsCommand {
    /// The account's outposts, with their queue depth and active claims.
    List,
    /// Create an outpost.
    Create {
        /// Its name
        name: String,
        /// Its platform
        #[arg(long, default_value = "linux", value_parser = ["linux", "macos", "windows"])]
        platform: String,
        /// A description
        #[arg(long)]
        description: Option<String>,
    },
    /// Delete an outpost.
    Delete {
        /// Its id, e.g. outpost_env-...
        id: String,
    },
}

pub(crate) async fn run(args: OutpostsArgs) -> anyhow::Result<()> {
    let (client, api_url) = client(args.api_url.as_deref())?;
    match args.command {
        OutpostsCommand::List => {
            let outposts = client
                .list_outposts()
                .await
                .map_err(|e| explain(e, &api_url, "list outposts", None))?;
            if args.json {
                output::json(&outposts)?;
            } else if outposts.is_empty() {
                output::println("No outposts. Create one with `garrison outposts create NAME`.")?;
            } else {
                output::print(&table(&outposts))?;
            }
        }
        OutpostsCommand::Create {
            name,
            platform,
            description,
        } => {
            let body = CreateOutpost {
                name,
                platform: Platform::from(platform.as_str()),
                description,
            };
            let outpost = client
                .create_outpost(&body)
                .await
                .map_err(|e| explain(e, &api_url, "create an outpost", None))?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&outpost)?);
            } else {
                println!(
                    "Created outpost {} ({}, {}).",
                    printable(&outpost.metadata.outpost_id),
                    printable(&outpost.spec.name),
                    outpost.spec.platform
                );
            }
        }
        OutpostsCommand::Delete { id } => {
            client
                .delete_outpost(&id)
                .await
                .map_err(|e| explain(e, &api_url, "delete an outpost", Some(&id)))?;
            if args.json {
                println!("{}", serde_json::json!({ "deleted": id }));
            } else {
                println!("Deleted outpost {}.", printable(&id));
            }
        }
    }
    Ok(())
}

/// The client, with the token from the environment or the credentials file
/// and the API URL from the flag/environment, the credentials file or the
/// default.
fn client(api_url_flag: Option<&str>) -> anyhow::Result<(FleetClient, String)> {
    let env_token = std::env::var(TOKEN_ENV).ok().filter(|t| !t.is_empty());
    let api_url_flag = api_url_flag.filter(|u| !u.trim().is_empty());
    let credentials = if env_token.is_none() || api_url_flag.is_none() {
        match settings::credentials_path() {
            Ok(path) => settings::load_credentials(&path)?,
            Err(_) if env_token.is_some() => None,
            Err(e) => return Err(e.into()),
        }
    } else {
        None
    };
    let token = match (env_token, &credentials) {
        (Some(t), _) => Secret::new(t),
        (None, Some(c)) => c.token.clone(),
        (None, None) => bail!("no Devin token: set {TOKEN_ENV} or run `garrison connect`"),
    };
    let (what, api_url) = match (api_url_flag, &credentials) {
        (Some(u), _) => ("--api-url / DEVIN_API_URL", u.to_owned()),
        (None, Some(c)) => ("api_url in the credentials file", c.api_url.clone()),
        (None, None) => (
            "the default API URL",
            orchestrator::settings::DEFAULT_API_URL.to_owned(),
        ),
    };
    let api_url = crate::commands::connect::base_url(what, &api_url)?;
    let client = FleetClient::new(&api_url, token, ClientOptions::default())
        .map_err(|e| anyhow!("{e}"))
        .context("cannot build the fleet API client")?;
    Ok((client, api_url))
}

fn explain(error: FleetError, api_url: &str, action: &str, id: Option<&str>) -> anyhow::Error {
    match (&error, id) {
        (FleetError::Unauthorized { .. }, _) => anyhow!(
            "cannot {action}: {api_url} rejected the token (401); run `garrison connect` \
             or check {TOKEN_ENV}"
        ),
        (FleetError::Forbidden { scope_hint, .. }, _) => {
            anyhow!("cannot {action}: the token lacks the {scope_hint} scope (403)")
        }
        (FleetError::NotFound { .. }, Some(id)) => {
            anyhow!("cannot {action}: no such outpost: {}", printable(id))
        }
        _ => anyhow!("cannot {action} at {api_url}: {error}"),
    }
}

/// ID, NAME, PLATFORM, QUEUE, CLAIMS in aligned columns.
fn table(outposts: &[Outpost]) -> String {
    let rows: Vec<Vec<String>> = outposts
        .iter()
        .map(|o| {
            vec![
                printable(&o.metadata.outpost_id),
                printable(&o.spec.name),
                printable(o.spec.platform.as_str()),
                o.status.queue_depth.to_string(),
                o.status.active_claims.to_string(),
            ]
        })
        .collect();
    crate::format::table(&["ID", "NAME", "PLATFORM", "QUEUE", "CLAIMS"], &rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_columns() {
        let mut o = Outpost::default();
        o.metadata.outpost_id = "outpost_env-1".into();
        o.spec.name = "lab\u{1b}[31m".into();
        o.status.queue_depth = 3;
        let t = table(&[o]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "ID             NAME      PLATFORM  QUEUE  CLAIMS");
        assert_eq!(lines[1], "outpost_env-1  lab?[31m  linux     3      0");
    }
}
