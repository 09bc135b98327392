//! `garrison deploy tensorlake`: Garrison itself in a long-lived, named
//! Tensorlake sandbox, as a [`DeployTarget`] and [`Deployment`].
//!
//! Every run converges: the sandbox is created if there is none by that
//! name (resumed if suspended), and the serve process started if none runs.
//! So the same command, run every few minutes by cron or a systemd timer,
//! is the keep-alive for plans that suspend idle sandboxes. The credentials
//! are given to the process in its environment when it starts, through the
//! process API: never in an image, never in argv, never printed.
//!
//! [`plan`] decides, [`target`] deploys, [`watch`] has the read-only modes
//! and `--terminate`, [`lookup`] finds the sandbox for both.

mod lookup;
mod plan;
mod target;
mod watch;

use async_trait::async_trait;
use sandbox::plugin::deploy::{DeployHelp, DeployOutput, DeployRequest, DeployTarget, Deployment};

use crate::TensorlakeSettings;

/// `garrison deploy tensorlake`'s options and rules.
pub(crate) static TARGET: Target = Target;

/// The deploy target of the Tensorlake plug-in.
pub(crate) struct Target;

const AFTER_HELP: &str = "\
Examples:
  # First run creates the sandbox and starts `garrison serve` in it; later
  # runs resume it if Tensorlake suspended it, and restart serve if it stopped:
  export TENSORLAKE_API_KEY=tl_...     # and DEVIN_OUTPOSTS_TOKEN, or `garrison connect`
  garrison deploy tensorlake

  # Serve options after `--` are passed to the deployed `garrison serve`:
  garrison deploy tensorlake --cpus 2 --memory-mb 4096 -- --max-concurrent 8 --repos https://github.com/acme/app

  garrison deploy tensorlake --status      # sandbox state, serve process, uptime
  garrison deploy tensorlake --logs -f     # the deployed serve's output, followed
  garrison deploy tensorlake --terminate   # delete the sandbox

Credentials:
  The Devin token (DEVIN_OUTPOSTS_TOKEN, else the credentials file of `garrison
  connect`), TENSORLAKE_API_KEY (or TENSORLAKE_API_KEY_FILE) and GIT_TOKEN if set
  are read here and put in the serve process's environment when it starts,
  through Tensorlake's process API: never in the image, never on a command line,
  never printed. To rotate one: --terminate, then deploy again.

Settings:
  Read as `garrison serve` reads them (its flags after `--`, its environment
  variables, the TOML file); the resolved values and the serve variables set
  here go to the deployed serve, and the TOML file is copied in. The deployed
  serve keeps its state in the sandbox, under TENSORLAKE_SANDBOX_ROOT/deploy.

Keep-alive:
  Run this command every few minutes, more often than your plan's idle window,
  e.g. the cron line (deploy.env: TENSORLAKE_API_KEY=..., DEVIN_OUTPOSTS_TOKEN=...,
  mode 0600)
    */5 * * * * set -a && . $HOME/.config/garrison/deploy.env && set +a && /usr/local/bin/garrison deploy tensorlake >>$HOME/garrison-deploy.log 2>&1
  or the systemd units packaging/garrison-deploy.service and
  packaging/garrison-deploy.timer (see the README).

Exit status of --status: 0 when serve runs, 3 when it does not (or there is no
sandbox), 1 on an error.";

static HELP: DeployHelp = DeployHelp {
    about: "Run `garrison serve --backend tensorlake` in a named Tensorlake sandbox, \
            idempotently (safe to run from cron as the keep-alive)",
    after_help: AFTER_HELP,
    default_name: plan::DEFAULT_NAME,
    name: "The sandbox's name (Tensorlake suspends and resumes only named ones)",
    image: "Image of the orchestrator's sandbox [default: TENSORLAKE_IMAGE, else Tensorlake's]",
    disk_mb: Some("Disk of the orchestrator's sandbox, MiB"),
    memory_mb_u32: false,
    timeout_secs: "Idle seconds before Tensorlake may suspend the orchestrator's sandbox \
                   (your plan may cap it; the keep-alive covers the rest)",
    timeout_range: None,
    status: "Print the sandbox's state, the serve process's and its uptime; change nothing",
    follow: "With --logs: keep printing; waits (without waking it) while the sandbox is \
             suspended",
    terminate: "Delete the sandbox (and the deployed serve with it)",
};

impl DeployTarget for Target {
    fn help(&self) -> &'static DeployHelp {
        &HELP
    }

    fn check_name(&self, name: &str) -> Result<(), String> {
        plan::check_name(name)
    }
}

#[async_trait]
impl Deployment for TensorlakeSettings {
    async fn ensure(
        &self,
        request: &DeployRequest,
        out: &mut dyn DeployOutput,
    ) -> anyhow::Result<()> {
        target::ensure(self, request, out).await
    }

    async fn status(&self, name: &str, out: &mut dyn DeployOutput) -> anyhow::Result<bool> {
        watch::status(&self.client()?, name, out).await
    }

    async fn logs(
        &self,
        name: &str,
        follow: bool,
        out: &mut dyn DeployOutput,
    ) -> anyhow::Result<()> {
        watch::logs(&self.client()?, name, follow, out).await
    }

    async fn terminate(&self, name: &str, out: &mut dyn DeployOutput) -> anyhow::Result<()> {
        watch::terminate(&self.client()?, name, out).await
    }
}
