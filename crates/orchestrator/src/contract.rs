//! The `devin-remote` spawn contract: exactly which environment the remote
//! gets. Nothing of Garrison's own environment is inherited, so neither the
//! account token nor any other secret of the orchestrator can reach it.

use std::collections::BTreeMap;

use fleet::Secret;

pub const GATEWAY_URL: &str = "DEVIN_OUTPOST_GATEWAY_URL";
pub const CONNECT_TOKEN: &str = "DEVIN_OUTPOST_CONNECT_TOKEN";
pub const SESSION_ID: &str = "DEVIN_OUTPOST_SESSION_ID";
pub const STATE_DIR: &str = "DEVIN_REMOTE_STATE_DIR";
pub const CHROME_PATH: &str = "DEVIN_CHROME_PATH";
pub const DESKTOP: &str = "DEVIN_OUTPOST_DESKTOP";

/// The remote binary's file name inside the sandbox's bin directory.
pub const REMOTE_BINARY: &str = "devin-remote";

pub(crate) const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What the remote needs to know, from the claim and the sandbox.
pub struct RemoteLaunch<'a> {
    pub gateway_url: &'a str,
    pub connect_token: &'a Secret,
    pub session_id: &'a str,
    pub state_dir: &'a str,
    pub home: &'a str,
    pub user: &'a str,
    pub chrome_path: Option<&'a str>,
    pub desktop: bool,
}

/// The complete environment of `devin-remote serve`.
pub fn remote_env(launch: &RemoteLaunch<'_>) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    let mut set = |k: &str, v: &str| {
        env.insert(k.to_owned(), v.to_owned());
    };
    set(GATEWAY_URL, launch.gateway_url);
    set(CONNECT_TOKEN, launch.connect_token.expose());
    set(SESSION_ID, launch.session_id);
    set(STATE_DIR, launch.state_dir);
    set("PATH", PATH);
    set("HOME", launch.home);
    set("USER", launch.user);
    set("LOGNAME", launch.user);
    set("LANG", "C.UTF-8");
    set("TMPDIR", "/tmp");
    set("TZ", "UTC");
    if let Some(chrome) = launch.chrome_path {
        set(CHROME_PATH, chrome);
    }
    if launch.desktop {
        set(DESKTOP, "true");
    }
    env
}

/// `devin-remote serve`, run from the binary put into the sandbox.
pub fn remote_argv(bin_dir: &str) -> Vec<String> {
    vec![format!("{bin_dir}/{REMOTE_BINARY}"), "serve".to_owned()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_is_exactly_the_contract() {
        let token = Secret::new("ct-123");
        let env = remote_env(&RemoteLaunch {
            gateway_url: "wss://g",
            connect_token: &token,
            session_id: "devin-1",
            state_dir: "/state",
            home: "/root",
            user: "root",
            chrome_path: None,
            desktop: false,
        });
        let keys: Vec<&str> = env.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                CONNECT_TOKEN,
                GATEWAY_URL,
                SESSION_ID,
                STATE_DIR,
                "HOME",
                "LANG",
                "LOGNAME",
                "PATH",
                "TMPDIR",
                "TZ",
                "USER"
            ]
        );
        assert_eq!(env[CONNECT_TOKEN], "ct-123");
        assert!(!env.contains_key("DEVIN_OUTPOSTS_TOKEN"));
    }
}
