//! The `devin-remote` spawn contract: exactly which environment the remote
//! gets. Nothing of Garrison's own environment is inherited, so neither the
//! account token nor any other secret of the orchestrator can reach it.

use std::collections::BTreeMap;

use fleet::Secret;

/// The gateway the remote dials.
pub(crate) const GATEWAY_URL: &str = "DEVIN_OUTPOST_GATEWAY_URL";
/// The token the remote connects with.
pub(crate) const CONNECT_TOKEN: &str = "DEVIN_OUTPOST_CONNECT_TOKEN";
/// The session the remote serves.
pub(crate) const SESSION_ID: &str = "DEVIN_OUTPOST_SESSION_ID";
/// Where the remote keeps its state.
pub(crate) const STATE_DIR: &str = "DEVIN_REMOTE_STATE_DIR";
/// The browser the remote drives.
pub(crate) const CHROME_PATH: &str = "DEVIN_CHROME_PATH";
/// The desktop the remote shows.
pub(crate) const DESKTOP: &str = "DEVIN_OUTPOST_DESKTOP";
/// The X display of the sandbox's desktop, set with [`DESKTOP`].
pub(crate) const DISPLAY: &str = "DISPLAY";

/// The remote binary's file name inside the sandbox's bin directory.
pub(crate) const REMOTE_BINARY: &str = "devin-remote";

pub(crate) const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What the remote needs to know, from the claim and the sandbox.
pub(crate) struct RemoteLaunch<'a> {
    /// The gateway to dial.
    pub gateway_url: &'a str,
    /// The connect token.
    pub connect_token: &'a Secret,
    /// The session.
    pub session_id: &'a str,
    /// The remote's state directory.
    pub state_dir: &'a str,
    /// The sandbox's `HOME` ([`sandbox::Handle::home`]).
    pub home: &'a str,
    /// The user the remote runs as in the sandbox (`USER`, `LOGNAME`), from
    /// [`sandbox::MachineInfo`], never Garrison's own.
    pub user: &'a str,
    /// A browser in the sandbox (`DEVIN_CHROME_PATH`), if it has one.
    pub chrome_path: Option<&'a str>,
    /// The X display of a desktop running in the sandbox: with it the
    /// remote gets `DISPLAY` and `DEVIN_OUTPOST_DESKTOP=true`.
    pub display: Option<&'a str>,
}

/// The complete environment of `devin-remote serve`.
pub(crate) fn remote_env(launch: &RemoteLaunch<'_>) -> BTreeMap<String, String> {
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
    // The desktop stream needs a display to capture, so one is never
    // announced without the other.
    if let Some(display) = launch.display {
        set(DESKTOP, "true");
        set(DISPLAY, display);
    }
    env
}

/// `devin-remote serve`, run from the binary put into the sandbox.
pub(crate) fn remote_argv(bin_dir: &str) -> Vec<String> {
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
            display: None,
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

    #[test]
    fn a_browser_and_a_desktop_add_exactly_their_variables() {
        let token = Secret::new("ct-123");
        let launch = |chrome_path, display| {
            remote_env(&RemoteLaunch {
                gateway_url: "wss://g",
                connect_token: &token,
                session_id: "devin-1",
                state_dir: "/state",
                home: "/home/dev",
                user: "dev",
                chrome_path,
                display,
            })
        };
        let bare = launch(None, None);
        assert_eq!(
            (bare["USER"].as_str(), bare["LOGNAME"].as_str()),
            ("dev", "dev")
        );
        for key in [CHROME_PATH, DESKTOP, DISPLAY] {
            assert!(!bare.contains_key(key), "{key}");
        }

        let browser = launch(Some("/usr/bin/chromium"), None);
        assert_eq!(browser[CHROME_PATH], "/usr/bin/chromium");
        assert_eq!(browser.len(), bare.len() + 1);

        let desktop = launch(None, Some(":99"));
        assert_eq!(desktop[DESKTOP], "true");
        assert_eq!(desktop[DISPLAY], ":99");
        assert_eq!(desktop.len(), bare.len() + 2);

        let both = launch(Some("/usr/bin/chromium"), Some(":99"));
        let added: Vec<&str> = both
            .keys()
            .filter(|k| !bare.contains_key(*k))
            .map(String::as_str)
            .collect();
        assert_eq!(added, [CHROME_PATH, DESKTOP, DISPLAY]);
    }
}
