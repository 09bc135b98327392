//! The pure part of `garrison deploy modal`: names, what to do with the
//! sandbox as found, the entry point that runs the deployed serve, and the
//! environment that goes into the deployment's Modal Secret.
//!
//! On Modal the deployed serve is the sandbox's entry point: the sandbox
//! lives exactly as long as serve does, so "serve is running" and "the
//! sandbox is running" are one fact and a deploy either leaves a running
//! sandbox alone or creates one.

use std::collections::BTreeMap;

use sandbox::plugin::deploy::DeployRequest;

use crate::ModalEnv;

/// The default name of the deployment: its Modal app and its sandbox.
pub(crate) const DEFAULT_NAME: &str = "garrison-orchestrator";

/// The directory, relative to the sandbox's starting directory, that holds
/// the deployment's binary, settings file, state and log (spelled out in
/// the scripts below).
#[cfg(test)]
pub(crate) const DEPLOY_DIR: &str = "garrison-deploy";

/// The deployed binary, relative to the sandbox's starting directory.
pub(crate) const BINARY: &str = "garrison-deploy/bin/garrison";

/// The settings file copied in, relative to the sandbox's starting directory.
pub(crate) const CONFIG_FILE: &str = "garrison-deploy/config/garrison.toml";

/// The host's Modal image cache, copied in so image names resolve inside.
pub(crate) const IMAGE_CACHE: &str = "garrison-deploy/state/modal/images.json";

/// The serve's output (stdout and stderr), appended to by [`ENTRY`] and
/// read by [`READ_LOG`].
#[cfg(test)]
pub(crate) const LOG_FILE: &str = "garrison-deploy/serve.log";

/// Modal object names are at most 64 characters; the Secret's name adds
/// [`SECRET_SUFFIX`] to the deployment's.
const MAX_NAME: usize = 64 - SECRET_SUFFIX.len();

/// The Secret `<name>-env` holds the deployed serve's environment.
const SECRET_SUFFIX: &str = "-env";

/// The entry point: `sh -c ENTRY sh SERVE_ARGV...`. It makes the layout,
/// waits for `deploy` to upload the binary (renamed into place, so it is
/// never seen half-written), and becomes `garrison serve` with its output
/// appended to the log. Credentials are in the environment Modal gives
/// the container from the Secret; the script sets only paths.
pub(crate) const ENTRY: &str = r#"umask 077
mkdir -p garrison-deploy/bin garrison-deploy/state garrison-deploy/home garrison-deploy/config || exit 1
cd garrison-deploy || exit 1
export HOME="$PWD/home" GARRISON_CONFIG="$PWD/config"
while [ ! -x bin/garrison ]; do sleep 1; done
echo "$$" > serve.pid
exec bin/garrison "$@" >> serve.log 2>&1"#;

/// `sh -c WRITE sh PATH MODE` with the content on stdin: written beside
/// PATH (under a name of its own, so two deploys never mix their bytes)
/// and renamed into place.
pub(crate) const WRITE: &str = r#"set -e
t="$1.deploy-tmp.$$"
mkdir -p "$(dirname "$1")"
rm -f "$t"
cat > "$t"
chmod "$2" "$t"
mv -f "$t" "$1""#;

/// `sh -c READ_LOG sh OFFSET MAX`: up to MAX bytes of the log from OFFSET.
pub(crate) const READ_LOG: &str = r#"[ -f garrison-deploy/serve.log ] || exit 0
tail -c +"$(($1 + 1))" garrison-deploy/serve.log | head -c "$2""#;

/// `sh -c SERVE_STATE sh`: `running`, `waiting` (no binary yet),
/// `starting` (the entry point has not seen it yet) or `gone`.
pub(crate) const SERVE_STATE: &str = r#"cd garrison-deploy 2>/dev/null || { echo waiting; exit 0; }
if [ -f serve.pid ]; then
  if kill -0 "$(cat serve.pid)" 2>/dev/null; then echo running; else echo gone; fi
  exit 0
fi
if [ -x bin/garrison ]; then echo starting; else echo waiting; fi"#;

/// The Modal Secret holding the deployment's environment.
pub(crate) fn secret_name(name: &str) -> String {
    format!("{name}{SECRET_SUFFIX}")
}

/// Modal's object names: letters, digits, `-`, `_` and `.`, short enough
/// that `<name>-env` is one too.
pub(crate) fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "--name {name:?}: a deployment name is 1-{MAX_NAME} letters, digits, '-', '_' or '.'"
        ))
    }
}

/// A sandbox of the deployment's app, as listed.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Found {
    /// `sb-...`.
    pub(crate) id: String,
    /// Its Modal name.
    pub(crate) name: String,
    /// Unix seconds.
    pub(crate) created_at: f64,
    /// Its maximum lifetime.
    pub(crate) timeout_secs: u32,
}

/// What a deploy does.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Step {
    /// A sandbox of that name runs (and with it serve): leave it alone.
    Keep(Found),
    /// None runs: write the Secret, create the sandbox, upload the binary.
    Create,
}

/// The running sandbox named `name` among `running` (Modal keeps names
/// unique among running sandboxes of an app; the newest wins if not).
pub(crate) fn find<'a>(running: &'a [Found], name: &str) -> Option<&'a Found> {
    running
        .iter()
        .filter(|s| s.name == name)
        .max_by(|a, b| a.created_at.total_cmp(&b.created_at))
}

pub(crate) fn step(running: &[Found], name: &str) -> Step {
    match find(running, name) {
        Some(found) => Step::Keep(found.clone()),
        None => Step::Create,
    }
}

/// Seconds until Modal ends the sandbox at its lifetime, never negative.
pub(crate) fn seconds_left(found: &Found, now: f64) -> u64 {
    let end = found.created_at + f64::from(found.timeout_secs);
    (end - now).max(0.0) as u64
}

/// The entry point's argv: the deployed serve's command line, no secret
/// in it.
pub(crate) fn entrypoint(has_config: bool, forwarded: &[String]) -> Vec<String> {
    let mut argv = vec![
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        ENTRY.to_owned(),
        "sh".to_owned(),
        "serve".to_owned(),
        "--backend".to_owned(),
        "modal".to_owned(),
        // Relative to the deploy directory the entry point runs in.
        "--state-dir".to_owned(),
        "state".to_owned(),
    ];
    if has_config {
        argv.push("--config".to_owned());
        argv.push("config/garrison.toml".to_owned());
    }
    argv.extend(forwarded.iter().cloned());
    argv
}

/// The acceptor id of every sandbox of the deployment `name` (a valid
/// acceptor id for every valid name: see [`check_name`]).
pub(crate) fn acceptor_id(name: &str) -> String {
    format!("garrison-deploy-{name}")
}

/// The image of the orchestrator's sandbox: `--image`, else the sessions'
/// image (`MODAL_IMAGE`, else `default`), a name looked up in `names`.
pub(crate) fn orchestrator_image(
    explicit: Option<&str>,
    modal: &ModalEnv,
    names: &crate::image::ImageCache,
) -> Result<String, String> {
    let wanted = explicit
        .or(modal.image.as_deref())
        .unwrap_or(crate::backend::DEFAULT_IMAGE);
    if crate::image::is_image_id(wanted) {
        return Ok(wanted.to_owned());
    }
    names.image_for(wanted).map(str::to_owned).ok_or_else(|| {
        format!(
            "no Modal image named {wanted:?} here: build it with \
             `garrison image build {wanted} --backend modal`, or pass --image im-..."
        )
    })
}

/// The deployed serve's environment, all of it in the deployment's Modal
/// Secret: the credentials (the Devin token, the Modal token, `GIT_TOKEN`
/// if set here), the resolved settings, and the serve variables set on this
/// host. Paths are set by [`ENTRY`]. Modal gives a Secret's variables to
/// the container it is attached to, and Garrison attaches it only to the
/// orchestrator's sandbox, never to a session's.
///
/// Unless one is configured, the acceptor id is the deployment's
/// ([`acceptor_id`]), not one generated per state directory: each new
/// sandbox starts with an empty state, and with the same id its serve
/// knows its predecessor's claims as its own and adopts them (with the
/// session sandboxes still running) instead of leaving them to lapse.
pub(crate) fn serve_env(modal: &ModalEnv, request: &DeployRequest) -> BTreeMap<String, String> {
    let mut env = request.serve_env.clone();
    // Modal's own variables name host files or this host's profile.
    for var in [
        crate::settings::PROFILE_ENV,
        crate::settings::CONFIG_PATH_ENV,
    ] {
        env.remove(var);
    }
    let mut set = |k: &str, v: &str| {
        env.insert(k.to_owned(), v.to_owned());
    };
    let acceptor = request
        .acceptor_id
        .clone()
        .unwrap_or_else(|| acceptor_id(&request.name));
    set("DEVIN_WORKER_ACCEPTOR_ID", &acceptor);
    set(
        crate::settings::TOKEN_ID_ENV,
        modal.credentials.token_id.expose(),
    );
    set(
        crate::settings::TOKEN_SECRET_ENV,
        modal.credentials.token_secret.expose(),
    );
    set(crate::settings::API_URL_ENV, &modal.api_url);
    set(
        crate::settings::TIMEOUT_ENV,
        &modal.timeout.as_secs().to_string(),
    );
    if let Some(image) = &modal.image {
        set(crate::settings::IMAGE_ENV, image);
    }
    if !modal.regions.is_empty() {
        set(crate::settings::REGION_ENV, &modal.regions.join(","));
    }
    set(
        "PATH",
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    );
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(id: &str, name: &str, created_at: f64) -> Found {
        Found {
            id: id.into(),
            name: name.into(),
            created_at,
            timeout_secs: 86_400,
        }
    }

    #[test]
    fn a_running_sandbox_of_that_name_is_kept_else_one_is_created() {
        assert_eq!(step(&[], DEFAULT_NAME), Step::Create);
        let others = [found("sb-1", "other", 1.0)];
        assert_eq!(step(&others, DEFAULT_NAME), Step::Create);
        let two = [
            found("sb-1", DEFAULT_NAME, 1.0),
            found("sb-2", DEFAULT_NAME, 5.0),
            found("sb-3", "other", 9.0),
        ];
        assert_eq!(
            step(&two, DEFAULT_NAME),
            Step::Keep(found("sb-2", DEFAULT_NAME, 5.0))
        );
    }

    #[test]
    fn time_left_counts_down_to_the_lifetime_and_stops_at_zero() {
        let f = found("sb-1", DEFAULT_NAME, 1000.0);
        assert_eq!(seconds_left(&f, 1000.0), 86_400);
        assert_eq!(seconds_left(&f, 1000.0 + 86_000.0), 400);
        assert_eq!(seconds_left(&f, 1e9), 0);
    }

    #[test]
    fn names_follow_modal_rules_with_room_for_the_secret_suffix() {
        assert!(check_name(DEFAULT_NAME).is_ok());
        assert!(check_name("a.b_c-1").is_ok());
        assert!(check_name(&"a".repeat(60)).is_ok());
        for bad in ["", "a b", "a/b", &"a".repeat(61)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
        assert_eq!(secret_name("g"), "g-env");
    }

    #[test]
    fn the_entry_point_runs_serve_on_modal_with_the_forwarded_options() {
        let argv = entrypoint(true, &["--max-concurrent".into(), "8".into()]);
        assert_eq!(&argv[..2], ["/bin/sh", "-c"]);
        assert_eq!(
            &argv[3..],
            [
                "sh",
                "serve",
                "--backend",
                "modal",
                "--state-dir",
                "state",
                "--config",
                "config/garrison.toml",
                "--max-concurrent",
                "8"
            ]
        );
        for path in [BINARY, CONFIG_FILE, IMAGE_CACHE, LOG_FILE] {
            assert!(path.starts_with(DEPLOY_DIR), "{path}");
        }
    }

    /// The entry point, run here: it waits for the binary, then becomes it
    /// with the arguments, HOME and GARRISON_CONFIG in the deploy directory
    /// and its output in the log.
    #[test]
    fn the_entry_point_waits_for_the_binary_and_becomes_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("/bin/sh")
            .args(["-c", ENTRY, "sh", "serve", "--flag"])
            .current_dir(dir.path())
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .spawn()
            .unwrap();
        let bin = dir.path().join(BINARY);
        for _ in 0..600 {
            if bin.parent().unwrap().exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let fake = "#!/bin/sh\necho \"args=$* home=$HOME config=$GARRISON_CONFIG\"\n";
        let tmp = dir.path().join("fake");
        std::fs::write(&tmp, fake).unwrap();
        std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        std::fs::rename(&tmp, &bin).unwrap();
        assert!(child.wait().unwrap().success());
        let log = std::fs::read_to_string(dir.path().join(LOG_FILE)).unwrap();
        let deploy = dir.path().join(DEPLOY_DIR).canonicalize().unwrap();
        assert_eq!(
            log.trim(),
            format!(
                "args=serve --flag home={0}/home config={0}/config",
                deploy.display()
            )
        );
    }

    #[test]
    fn the_environment_carries_the_credentials_and_settings_but_no_host_paths() {
        let source = common::settings::MapSource::vars(&[
            ("MODAL_TOKEN_ID", "ak-secret-id"),
            ("MODAL_TOKEN_SECRET", "as-secret-secret"),
            ("MODAL_IMAGE", "im-abc"),
        ]);
        let modal = crate::settings::resolve(&source).unwrap();
        let mut request = DeployRequest {
            name: DEFAULT_NAME.into(),
            image: None,
            cpus: 1.0,
            memory_mb: 2048,
            disk_mb: None,
            timeout_secs: 86_400,
            binary: None,
            config_file: None,
            serve_args: Vec::new(),
            serve_env: [
                ("DEVIN_OUTPOSTS_TOKEN", "cog_secret_token"),
                ("MODAL_PROFILE", "mine"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
            acceptor_id: None,
            state_dir: "/var/lib/here".into(),
        };
        let env = serve_env(&modal, &request);
        let get = |k: &str| env.get(k).map(String::as_str);
        assert_eq!(get("DEVIN_OUTPOSTS_TOKEN"), Some("cog_secret_token"));
        assert_eq!(get("MODAL_TOKEN_ID"), Some("ak-secret-id"));
        assert_eq!(get("MODAL_TOKEN_SECRET"), Some("as-secret-secret"));
        assert_eq!(get("MODAL_IMAGE"), Some("im-abc"));
        assert_eq!(get("MODAL_SANDBOX_TIMEOUT_SECS"), Some("86400"));
        // One acceptor id for the deployment, whatever sandbox runs it.
        assert_eq!(
            get("DEVIN_WORKER_ACCEPTOR_ID"),
            Some("garrison-deploy-garrison-orchestrator")
        );
        for absent in ["HOME", "GARRISON_HOME", "MODAL_PROFILE"] {
            assert_eq!(get(absent), None, "{absent}");
        }
        request.acceptor_id = Some("mine".into());
        assert_eq!(
            serve_env(&modal, &request)["DEVIN_WORKER_ACCEPTOR_ID"],
            "mine"
        );
        let argv = entrypoint(false, &[]).join(" ");
        for secret in ["cog_secret_token", "ak-secret-id", "as-secret-secret"] {
            assert!(!argv.contains(secret));
        }
    }

    #[test]
    fn the_orchestrator_image_is_explicit_else_the_sessions_image_by_id_or_built_name() {
        let source = common::settings::MapSource::vars(&[
            ("MODAL_TOKEN_ID", "a"),
            ("MODAL_TOKEN_SECRET", "b"),
        ]);
        let mut modal = crate::settings::resolve(&source).unwrap();
        let mut names = crate::image::ImageCache::default();
        assert!(orchestrator_image(None, &modal, &names).is_err());
        names.names.insert("default".into(), "k1".into());
        names.by_recipe.insert("k1".into(), "im-built".into());
        assert_eq!(
            orchestrator_image(None, &modal, &names).unwrap(),
            "im-built"
        );
        modal.image = Some("im-set".into());
        assert_eq!(orchestrator_image(None, &modal, &names).unwrap(), "im-set");
        assert_eq!(
            orchestrator_image(Some("im-flag"), &modal, &names).unwrap(),
            "im-flag"
        );
    }
}
