//! `garrison deploy modal`: Garrison itself in a named Modal Sandbox, as
//! a [`DeployTarget`] and [`Deployment`].
//!
//! [`plan`] decides (names, the entry point, the Secret's environment),
//! [`target`] deploys, [`watch`] has the read-only modes and
//! `--terminate`, [`access`] reaches Modal for both.

mod access;
mod plan;
mod target;
mod watch;

use async_trait::async_trait;
use sandbox::plugin::deploy::{DeployHelp, DeployOutput, DeployRequest, DeployTarget, Deployment};

use crate::ModalEnv;

/// `garrison deploy modal`'s options and rules.
pub(crate) static TARGET: Target = Target;

/// The deploy target of the Modal plug-in.
pub(crate) struct Target;

const AFTER_HELP: &str = "\
Examples:
  # The first run writes the Modal Secret, creates the sandbox and copies this
  # binary in; it then runs `garrison serve --backend modal` as its entry point.
  # Later runs leave a running sandbox alone and create a new one when Modal
  # ended the old one (at its maximum lifetime, 24 h):
  export MODAL_TOKEN_ID=ak-... MODAL_TOKEN_SECRET=as-...   # or ~/.modal.toml
  export DEVIN_OUTPOSTS_TOKEN=cog_...                      # or `garrison connect`
  garrison image build default --backend modal
  garrison deploy modal

  # Serve options after `--` are passed to the deployed `garrison serve`:
  garrison deploy modal --cpus 2 --memory-mb 4096 -- --max-concurrent 8 --repos https://github.com/acme/app

  garrison deploy modal --status      # sandbox, serve, uptime, time left
  garrison deploy modal --logs -f     # the deployed serve's output, followed
  garrison deploy modal --terminate   # end the sandbox and delete the Secret

Credentials:
  The Devin token (DEVIN_OUTPOSTS_TOKEN, else the credentials file of `garrison
  connect`), the Modal token (MODAL_TOKEN_ID and MODAL_TOKEN_SECRET, else
  ~/.modal.toml) and GIT_TOKEN if set are read here and written, with the other
  serve settings, to the Modal Secret <NAME>-env, which is attached to the
  orchestrator's sandbox only: Modal puts its variables in that sandbox's
  environment. Never in the image, never on a command line, never printed; the
  session sandboxes the deployed serve starts get no Secret. The Secret is
  written when a sandbox is created: to rotate a credential, --terminate, then
  deploy again.

Settings:
  Read as `garrison serve` reads them (its flags after `--`, its environment
  variables, the TOML file); the resolved values and the serve variables set
  here go to the deployed serve, the TOML file and this host's Modal image
  names (<state>/modal/images.json) are copied in. The deployed serve keeps its
  state in the sandbox, so a new sandbox starts with an empty state; its serve
  adopts the claims the previous one held, as the deployment has one acceptor
  id (garrison-deploy-<NAME>, unless DEVIN_WORKER_ACCEPTOR_ID is set).

Keep-alive:
  Modal ends a sandbox at its maximum lifetime (--timeout-secs, at most 24 h).
  Run this command every few minutes: it creates a new sandbox once the old one
  ended, and changes nothing otherwise. E.g. the cron line (deploy-modal.env:
  MODAL_TOKEN_ID=..., MODAL_TOKEN_SECRET=..., DEVIN_OUTPOSTS_TOKEN=..., mode 0600)
    */5 * * * * set -a && . $HOME/.config/garrison/deploy-modal.env && set +a && /usr/local/bin/garrison deploy modal >>$HOME/garrison-deploy-modal.log 2>&1
  or the systemd units packaging/garrison-deploy-modal.service and
  packaging/garrison-deploy-modal.timer (see the README).

Exit status of --status: 0 when serve runs, 3 when it does not (or there is no
sandbox), 1 on an error.";

static HELP: DeployHelp = DeployHelp {
    about: "Run `garrison serve --backend modal` in a named Modal Sandbox, idempotently \
            (safe to run from cron as the keep-alive)",
    after_help: AFTER_HELP,
    default_name: plan::DEFAULT_NAME,
    name: "The deployment's name: its Modal app, its sandbox, and (with `-env`) its Secret",
    image: "Image of the orchestrator's sandbox: an image id, or a name built with \
            `garrison image build NAME --backend modal` [default: MODAL_IMAGE, else default]",
    disk_mb: None,
    memory_mb_u32: true,
    timeout_secs: "Lifetime of the orchestrator's sandbox, at most Modal's 24 h (the \
                   keep-alive creates the next one)",
    timeout_range: Some((60, 86_400)),
    status: "Print the sandbox, whether serve runs, its uptime and the time left; change \
             nothing",
    follow: "With --logs: keep printing, and go on with the next sandbox when the \
             keep-alive creates one",
    terminate: "End the sandbox (and the deployed serve with it) and delete the Secret",
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
impl Deployment for ModalEnv {
    async fn ensure(
        &self,
        request: &DeployRequest,
        out: &mut dyn DeployOutput,
    ) -> anyhow::Result<()> {
        target::ensure(self, request, out).await
    }

    async fn status(&self, name: &str, out: &mut dyn DeployOutput) -> anyhow::Result<bool> {
        let client = access::client_for(self)?;
        watch::status(&client, &access::environment_of(self), name, out).await
    }

    async fn logs(
        &self,
        name: &str,
        follow: bool,
        out: &mut dyn DeployOutput,
    ) -> anyhow::Result<()> {
        let client = access::client_for(self)?;
        watch::logs(&client, &access::environment_of(self), name, follow, out).await
    }

    async fn terminate(&self, name: &str, out: &mut dyn DeployOutput) -> anyhow::Result<()> {
        let client = access::client_for(self)?;
        watch::terminate(&client, &access::environment_of(self), name, out).await
    }
}
