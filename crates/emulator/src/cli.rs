//! `garrison emulate`: runs the emulator as a process for demos and for
//! tests in other languages, printing what a client needs to connect.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use fleet::{Platform, TimestampFormat};

use crate::{Emulator, EmulatorConfig, Faults};

/// Flags of `garrison emulate`.
#[derive(Clone, Debug, clap::Args)]
pub struct EmulateArgs {
    /// Address to listen on; only loopback unless --allow-remote.
    #[arg(long, default_value = "127.0.0.1:8790")]
    pub listen: SocketAddr,
    /// Allow a non-loopback --listen (the emulator has no real security).
    #[arg(long)]
    pub allow_remote: bool,
    /// Name of an outpost to create at start.
    #[arg(long, default_value = "demo")]
    pub outpost: String,
    /// Lifetime of a claim.
    #[arg(long, default_value_t = 300)]
    pub claim_ttl_secs: u64,
    /// Longest a watch stream stays open.
    #[arg(long, default_value_t = 300)]
    pub max_stream_secs: u64,
    /// Interval of keepalive comments on a watch stream.
    #[arg(long, default_value_t = 15)]
    pub keepalive_secs: u64,
    /// How long released suspended/terminated rows linger as pending.
    #[arg(long, default_value_t = 30)]
    pub linger_secs: u64,
    /// Lag between a remote's exit and the session status changing.
    #[arg(long, default_value_t = 2000)]
    pub status_lag_ms: u64,
    /// Lifetime of a connect token.
    #[arg(long, default_value_t = 86_400)]
    pub connect_token_ttl_secs: u64,
    /// A callback URL the connect page may relay codes to, besides
    /// Garrison's default (repeatable; an exact URL, as registered with
    /// Cognition).
    #[arg(long = "allow-callback", value_name = "URL")]
    pub allow_callbacks: Vec<String>,
    /// Leave Garrison's default callback URL off the allowlist.
    #[arg(long)]
    pub no_default_callback: bool,
    /// Spelling of claim_deadline: seconds, millis or iso8601.
    #[arg(long, default_value = "seconds", value_parser = parse_format)]
    pub deadline_format: TimestampFormat,
    /// The devin-remote simulator binary to distribute (default: search
    /// next to this executable).
    #[arg(long)]
    pub remote_binary: Option<PathBuf>,
    /// Fraction of fleet API requests answered 500/503.
    #[arg(long, default_value_t = 0.0, value_parser = parse_rate)]
    pub error_rate: f64,
    /// Fraction of fleet API requests carried out but answered 502 (the
    /// answer lost on its way back).
    #[arg(long, default_value_t = 0.0, value_parser = parse_rate)]
    pub lost_answer_rate: f64,
    /// Latency added to every fleet API request.
    #[arg(long, default_value_t = 0)]
    pub latency_ms: u64,
    /// Close each watch stream after this many seconds.
    #[arg(long)]
    pub cut_watch_every_secs: Option<u64>,
    /// Keep watch streams open but send no events.
    #[arg(long)]
    pub withhold_events: bool,
    /// Fraction of reads of a running session that show "suspended".
    #[arg(long, default_value_t = 0.0, value_parser = parse_rate)]
    pub transient_suspended_rate: f64,
    /// Fraction of watch events sent twice (at-least-once delivery).
    #[arg(long, default_value_t = 0.0, value_parser = parse_rate)]
    pub duplicate_event_rate: f64,
    /// Render a linux platform as null on outposts and queue entries.
    #[arg(long)]
    pub null_platform: bool,
    /// Fraction of claim answers sent without a claim_deadline.
    #[arg(long, default_value_t = 0.0, value_parser = parse_rate)]
    pub claim_deadline_missing_rate: f64,
    /// Send claim_deadline and updated_at as whole Unix seconds, as the
    /// reference server does.
    #[arg(long)]
    pub whole_second_timestamps: bool,
    /// Give a release no watch event, as Cognition's model of the server
    /// does: watchers see it only with a later change.
    #[arg(long)]
    pub silent_release: bool,
}

fn parse_format(s: &str) -> Result<TimestampFormat, String> {
    match s {
        "seconds" => Ok(TimestampFormat::Seconds),
        "millis" => Ok(TimestampFormat::Millis),
        "iso8601" => Ok(TimestampFormat::Iso8601),
        _ => Err("expected seconds, millis or iso8601".into()),
    }
}

fn parse_rate(s: &str) -> Result<f64, String> {
    let rate: f64 = s.parse().map_err(|_| "not a number".to_owned())?;
    if (0.0..=1.0).contains(&rate) {
        Ok(rate)
    } else {
        Err("must be within 0..=1".into())
    }
}

impl EmulateArgs {
    /// The emulator configuration these flags describe.
    pub fn config(&self) -> anyhow::Result<EmulatorConfig> {
        if !self.listen.ip().is_loopback() && !self.allow_remote {
            bail!(
                "refusing to listen on non-loopback {} without --allow-remote",
                self.listen
            );
        }
        let mut connect_callbacks = Vec::new();
        if !self.no_default_callback {
            connect_callbacks.push(fleet::pkce::DEFAULT_CALLBACK_URL.to_owned());
        }
        for url in &self.allow_callbacks {
            match url::Url::parse(url) {
                Ok(u) if matches!(u.scheme(), "http" | "https") => {
                    connect_callbacks.push(url.clone());
                }
                _ => bail!("--allow-callback {url:?} is not an http(s) URL"),
            }
        }
        Ok(EmulatorConfig {
            listen: self.listen,
            connect_callbacks,
            claim_ttl: Duration::from_secs(self.claim_ttl_secs),
            max_stream: Duration::from_secs(self.max_stream_secs),
            keepalive: Duration::from_secs(self.keepalive_secs),
            linger: Duration::from_secs(self.linger_secs),
            status_lag: Duration::from_millis(self.status_lag_ms),
            connect_token_ttl: Duration::from_secs(self.connect_token_ttl_secs),
            deadline_format: self.deadline_format,
            remote_binary: self.remote_binary.clone(),
            faults: Faults {
                error_rate: self.error_rate,
                lost_answer_rate: self.lost_answer_rate,
                latency_ms: self.latency_ms,
                cut_watch_every_secs: self.cut_watch_every_secs,
                withhold_events: self.withhold_events,
                transient_suspended_rate: self.transient_suspended_rate,
                duplicate_event_rate: self.duplicate_event_rate,
                null_platform: self.null_platform,
                claim_deadline_missing_rate: self.claim_deadline_missing_rate,
                whole_second_timestamps: self.whole_second_timestamps,
                silent_release: self.silent_release,
            },
        })
    }
}

/// Runs the emulator until Ctrl-C or SIGTERM.
pub async fn run(args: EmulateArgs) -> anyhow::Result<()> {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .try_init();
    let config = args.config()?;
    if let Some(path) = &config.remote_binary {
        anyhow::ensure!(
            path.is_file(),
            "--remote-binary {} is not a file",
            path.display()
        );
    }
    let emulator = Emulator::start(config).await?;
    let outpost_id = emulator.create_outpost(&args.outpost, Platform::Linux);
    if emulator.remote_sha().is_empty() {
        tracing::warn!("no devin-remote-sim binary found; the static distribution answers 404");
    }
    // The account token is a local test credential: printing it is the point.
    let mut out = std::io::stdout().lock();
    writeln!(out, "base_url={}", emulator.base_url())?;
    writeln!(out, "token={}", emulator.account_token())?;
    writeln!(out, "outpost_id={outpost_id}")?;
    writeln!(out, "static_base_url={}", emulator.static_base_url())?;
    out.flush()?;
    drop(out);
    wait_for_signal().await.context("waiting for a signal")?;
    tracing::info!("shutting down");
    emulator.shutdown().await;
    Ok(())
}

async fn wait_for_signal() -> std::io::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r,
        _ = term.recv() => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: EmulateArgs,
    }

    #[test]
    fn refuses_non_loopback_without_allow_remote() {
        let w = Wrapper::parse_from(["x", "--listen", "0.0.0.0:8790"]);
        assert!(w.args.config().is_err());
        let w = Wrapper::parse_from(["x", "--listen", "0.0.0.0:8790", "--allow-remote"]);
        assert!(w.args.config().is_ok());
    }

    #[test]
    fn flags_map_to_config() {
        let w = Wrapper::parse_from([
            "x",
            "--claim-ttl-secs",
            "7",
            "--deadline-format",
            "iso8601",
            "--error-rate",
            "0.5",
            "--withhold-events",
            "--duplicate-event-rate",
            "0.25",
            "--null-platform",
            "--claim-deadline-missing-rate",
            "0.25",
            "--whole-second-timestamps",
        ]);
        let c = w.args.config().unwrap();
        assert_eq!(c.claim_ttl, Duration::from_secs(7));
        assert_eq!(c.deadline_format, TimestampFormat::Iso8601);
        assert_eq!(c.faults.error_rate, 0.5);
        assert!(c.faults.withhold_events);
        assert_eq!(c.faults.duplicate_event_rate, 0.25);
        assert!(c.faults.null_platform);
        assert_eq!(c.faults.claim_deadline_missing_rate, 0.25);
        assert!(c.faults.whole_second_timestamps);
        assert_eq!(c.connect_callbacks, [fleet::pkce::DEFAULT_CALLBACK_URL]);
        let w = Wrapper::parse_from([
            "x",
            "--allow-callback",
            "https://partner.example.com/devin/outpost-callback",
            "--no-default-callback",
        ]);
        assert_eq!(
            w.args.config().unwrap().connect_callbacks,
            ["https://partner.example.com/devin/outpost-callback"]
        );
        let w = Wrapper::parse_from(["x", "--allow-callback", "not a url"]);
        assert!(w.args.config().is_err());
        assert!(Wrapper::try_parse_from(["x", "--error-rate", "2"]).is_err());
    }
}
