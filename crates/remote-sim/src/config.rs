//! The spawn contract: what `devin-remote serve` reads from its environment.
//!
//! Parsing is pure (the environment is passed in as a lookup function) so the
//! rules are unit-tested without touching the process environment.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use tokio_tungstenite::tungstenite::http::{HeaderValue, Uri};

pub(crate) const GATEWAY_URL: &str = "DEVIN_OUTPOST_GATEWAY_URL";
pub(crate) const CONNECT_TOKEN: &str = "DEVIN_OUTPOST_CONNECT_TOKEN";
pub(crate) const SESSION_ID: &str = "DEVIN_OUTPOST_SESSION_ID";
pub(crate) const STATE_DIR: &str = "DEVIN_REMOTE_STATE_DIR";
pub(crate) const CHROME_PATH: &str = "DEVIN_CHROME_PATH";
/// Simulator only (the real remote has no such knob): how long to keep
/// retrying an unreachable gateway, in seconds. Lets tests of the
/// "unreachable" exit finish quickly.
pub(crate) const CONNECT_BUDGET: &str = "DEVIN_REMOTE_SIM_CONNECT_BUDGET_SECS";

const DEFAULT_CONNECT_BUDGET: Duration = Duration::from_secs(30);

pub(crate) struct Config {
    pub gateway: Gateway,
    pub connect_token: ConnectToken,
    pub session_id: String,
    pub state_dir: PathBuf,
    pub connect_budget: Duration,
    pub chrome_path: Option<PathBuf>,
}

/// Where to dial, already checked to be a `ws://` URL with a host.
#[derive(Clone, Debug)]
pub(crate) struct Gateway {
    pub uri: Uri,
    /// Host without IPv6 brackets, ready for address parsing.
    pub host: String,
    pub port: u16,
}

/// The per-session connect token. Its `Debug` is redacted so it cannot
/// reach a log line by accident.
pub(crate) struct ConnectToken(String);

impl ConnectToken {
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ConnectToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ConnectToken(<redacted>)")
    }
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ConfigError {
    Missing(Vec<&'static str>),
    Invalid { name: &'static str, reason: String },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Missing(names) => write!(
                f,
                "missing required environment variable(s): {} (the spawn contract sets {GATEWAY_URL}, {CONNECT_TOKEN} and {SESSION_ID} together)",
                names.join(", ")
            ),
            ConfigError::Invalid { name, reason } => write!(f, "invalid {name}: {reason}"),
        }
    }
}

impl Config {
    pub(crate) fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        // Empty counts as missing: an orchestrator that sets a variable to ""
        // has the same bug as one that forgets it.
        let get = |name: &str| var(name).filter(|v| !v.is_empty());
        let url = get(GATEWAY_URL);
        let token = get(CONNECT_TOKEN);
        let session_id = get(SESSION_ID);
        let (Some(url), Some(token), Some(session_id)) =
            (url.clone(), token.clone(), session_id.clone())
        else {
            let missing = [
                (GATEWAY_URL, url.is_none()),
                (CONNECT_TOKEN, token.is_none()),
                (SESSION_ID, session_id.is_none()),
            ]
            .into_iter()
            .filter_map(|(name, absent)| absent.then_some(name))
            .collect();
            return Err(ConfigError::Missing(missing));
        };

        let gateway = parse_gateway(&url)?;
        // Both go into HTTP headers; check them now so a bad value is a
        // configuration error, not a confusing connect failure. The reason
        // never quotes the token.
        if HeaderValue::from_str(&format!("Bearer {token}")).is_err() {
            return Err(ConfigError::Invalid {
                name: CONNECT_TOKEN,
                reason: "not usable in an HTTP header".into(),
            });
        }
        if HeaderValue::from_str(&session_id).is_err() {
            return Err(ConfigError::Invalid {
                name: SESSION_ID,
                reason: "not usable in an HTTP header".into(),
            });
        }

        let state_dir = match get(STATE_DIR) {
            Some(dir) => PathBuf::from(dir),
            None => match get("HOME") {
                Some(home) => PathBuf::from(home).join(".devin-remote"),
                None => std::env::temp_dir().join(format!("devin-remote-{}", std::process::id())),
            },
        };

        let connect_budget =
            match get(CONNECT_BUDGET) {
                None => DEFAULT_CONNECT_BUDGET,
                Some(secs) => secs.parse::<u64>().map(Duration::from_secs).map_err(|_| {
                    ConfigError::Invalid {
                        name: CONNECT_BUDGET,
                        reason: format!("{secs:?} is not a whole number of seconds"),
                    }
                })?,
            };

        Ok(Config {
            gateway,
            connect_token: ConnectToken(token),
            session_id,
            state_dir,
            connect_budget,
            chrome_path: get(CHROME_PATH).map(|p| check_chrome(&p)).transpose()?,
        })
    }
}

/// The real remote hands `DEVIN_CHROME_PATH` to its browser tool, which
/// fails only when the agent first opens a page; the simulator refuses a
/// path that is not an executable file at start, so an orchestrator that
/// passes a wrong one fails its tests at once.
fn check_chrome(path: &str) -> Result<PathBuf, ConfigError> {
    use std::os::unix::fs::PermissionsExt;
    let invalid = |why: String| ConfigError::Invalid {
        name: CHROME_PATH,
        reason: format!("{path:?} {why}"),
    };
    let path_buf = PathBuf::from(path);
    if !path_buf.is_absolute() {
        return Err(invalid("is not an absolute path".into()));
    }
    let meta = std::fs::metadata(&path_buf).map_err(|e| invalid(format!("cannot be used: {e}")))?;
    if !meta.is_file() {
        return Err(invalid("is not a file".into()));
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(invalid("is not executable".into()));
    }
    Ok(path_buf)
}

fn parse_gateway(url: &str) -> Result<Gateway, ConfigError> {
    let invalid = |reason: String| ConfigError::Invalid {
        name: GATEWAY_URL,
        reason,
    };
    let uri: Uri = url
        .parse()
        .map_err(|err| invalid(format!("not a URL: {err}")))?;
    match uri.scheme_str() {
        Some("ws") => {}
        // The simulator only ever dials the local emulator, which serves
        // plain websockets; leaving TLS out keeps the static build simple.
        Some("wss") => {
            return Err(invalid(
                "wss:// is not supported by the simulator; use ws://".into(),
            ));
        }
        _ => return Err(invalid("expected a ws:// URL".into())),
    }
    let host = uri
        .host()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| invalid("no host".into()))?;
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = uri.port_u16().unwrap_or(80);
    Ok(Gateway { uri, host, port })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    const FULL: [(&str, &str); 4] = [
        (GATEWAY_URL, "ws://127.0.0.1:9/gateway"),
        (CONNECT_TOKEN, "tok-secret"),
        (SESSION_ID, "devin-1"),
        ("HOME", "/home/u"),
    ];

    #[test]
    fn names_every_missing_variable() {
        let err = Config::from_env(env(&[(CONNECT_TOKEN, "t")]))
            .err()
            .unwrap();
        assert_eq!(err, ConfigError::Missing(vec![GATEWAY_URL, SESSION_ID]));
        let err = Config::from_env(env(&[
            (GATEWAY_URL, ""),
            (CONNECT_TOKEN, "t"),
            (SESSION_ID, "s"),
        ]))
        .err()
        .unwrap();
        assert_eq!(err, ConfigError::Missing(vec![GATEWAY_URL]));
    }

    #[test]
    fn parses_the_contract() {
        let config = Config::from_env(env(&FULL)).unwrap();
        assert_eq!(config.gateway.host, "127.0.0.1");
        assert_eq!(config.gateway.port, 9);
        assert_eq!(config.session_id, "devin-1");
        assert_eq!(config.state_dir, PathBuf::from("/home/u/.devin-remote"));
        assert_eq!(config.connect_budget, DEFAULT_CONNECT_BUDGET);
        assert!(!format!("{:?}", config.connect_token).contains("tok-secret"));
    }

    #[test]
    fn state_dir_variable_wins() {
        let mut pairs = FULL.to_vec();
        pairs.push((STATE_DIR, "/tmp/s"));
        let config = Config::from_env(env(&pairs)).unwrap();
        assert_eq!(config.state_dir, PathBuf::from("/tmp/s"));
    }

    #[test]
    fn gateway_must_be_plain_websocket() {
        assert!(parse_gateway("wss://example.com/x").is_err());
        assert!(parse_gateway("http://127.0.0.1/").is_err());
        assert!(parse_gateway("not a url").is_err());
        let g = parse_gateway("ws://[::1]:8080/g").unwrap();
        assert_eq!((g.host.as_str(), g.port), ("::1", 8080));
        let g = parse_gateway("ws://localhost/g").unwrap();
        assert_eq!((g.host.as_str(), g.port), ("localhost", 80));
    }

    #[test]
    fn a_chrome_path_must_be_an_executable_file() {
        let dir = std::env::temp_dir().join(format!("sim-chrome-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let exe = dir.join("chromium");
        std::fs::write(&exe, "#!/bin/sh\n").unwrap();
        let plain = dir.join("not-executable");
        std::fs::write(&plain, "").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
        let with = |path: &str| {
            let mut pairs = FULL.to_vec();
            pairs.push((CHROME_PATH, path));
            Config::from_env(env(&pairs))
        };

        let config = with(exe.to_str().unwrap()).unwrap();
        assert_eq!(config.chrome_path, Some(exe.clone()));
        assert_eq!(Config::from_env(env(&FULL)).unwrap().chrome_path, None);
        for bad in [
            plain.to_str().unwrap(),
            dir.to_str().unwrap(),
            "/nonexistent/chromium",
            "chromium",
        ] {
            let err = with(bad).err().unwrap();
            assert!(
                matches!(&err, ConfigError::Invalid { name, .. } if *name == CHROME_PATH),
                "{bad}: {err}"
            );
            assert!(err.to_string().contains(bad), "{err}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_token_error_does_not_quote_it() {
        let mut pairs = FULL.to_vec();
        pairs[1] = (CONNECT_TOKEN, "secret\nvalue");
        let err = Config::from_env(env(&pairs)).err().unwrap();
        assert!(!err.to_string().contains("secret"));
    }
}
