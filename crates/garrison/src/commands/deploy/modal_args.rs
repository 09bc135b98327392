//! The options and help of `garrison deploy modal`.

use std::path::PathBuf;

use clap::Args;

pub(super) const AFTER_HELP: &str = "\
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

/// Options of `garrison deploy modal`.
#[derive(Args, Debug, Clone)]
#[command(group = clap::ArgGroup::new("mode").args(["status", "logs", "terminate"]))]
pub(crate) struct ModalDeployArgs {
    /// The deployment's name: its Modal app, its sandbox, and (with `-env`)
    /// its Secret
    #[arg(long, env = "GARRISON_DEPLOY_NAME", default_value = super::modal_plan::DEFAULT_NAME, value_name = "NAME")]
    pub name: String,

    /// Image of the orchestrator's sandbox: an image id, or a name built with
    /// `garrison image build NAME --backend modal` [default: MODAL_IMAGE, else default]
    #[arg(long, env = "GARRISON_DEPLOY_IMAGE", value_name = "IMAGE")]
    pub image: Option<String>,

    /// vCPUs of the orchestrator's sandbox
    #[arg(long, default_value_t = 1.0, value_name = "N")]
    pub cpus: f64,

    /// Memory of the orchestrator's sandbox, MiB
    #[arg(long, default_value_t = 2048, value_name = "MIB")]
    pub memory_mb: u32,

    /// Lifetime of the orchestrator's sandbox, at most Modal's 24 h (the
    /// keep-alive creates the next one)
    #[arg(long, default_value_t = 86_400, value_name = "SECS",
          value_parser = clap::value_parser!(u32).range(60..=86_400))]
    pub timeout_secs: u32,

    /// The Garrison binary copied into the sandbox (Linux x86-64)
    /// [default: this one]
    #[arg(long, value_name = "FILE")]
    pub binary: Option<PathBuf>,

    /// TOML settings file, copied into the sandbox for the deployed serve
    /// [default: $GARRISON_CONFIG/garrison.toml, if it exists]
    #[arg(long, env = "GARRISON_CONFIG_FILE", value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Print the sandbox, whether serve runs, its uptime and the time left;
    /// change nothing
    #[arg(long)]
    pub status: bool,

    /// Print the deployed serve's output; change nothing
    #[arg(long)]
    pub logs: bool,

    /// With --logs: keep printing, and go on with the next sandbox when the
    /// keep-alive creates one
    #[arg(short = 'f', long, requires = "logs")]
    pub follow: bool,

    /// End the sandbox (and the deployed serve with it) and delete the Secret
    #[arg(long)]
    pub terminate: bool,

    /// `garrison serve` options for the deployed serve (after `--`)
    #[arg(last = true, value_name = "SERVE_ARGS")]
    pub serve_args: Vec<String>,
}
