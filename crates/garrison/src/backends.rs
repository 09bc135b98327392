//! The registry: every backend this build of Garrison can serve sessions
//! on, and the one place that lists them.
//!
//! Adding a backend is a crate that implements [`sandbox::Sandbox`] and
//! exports a [`BackendPlugin`], plus one line in [`ALL`]. Everything else
//! (`--backend` and `backend =` validation, its settings and their errors,
//! redaction of its secrets, `doctor`'s credentials check and its reading
//! of the API's errors, `logs -f` from inside its sandboxes, `garrison
//! deploy <backend>`, `garrison image ... --backend <backend>`) follows
//! from the plug-in and the capabilities it offers.

use std::path::Path;
use std::sync::Arc;

use orchestrator::settings::{self, BackendSource, HostEnv, RawSettings, SettingsError};
use sandbox::plugin::{BackendPlugin, ConfiguredBackend};

/// Every backend, in the order `--help` and errors list them.
pub(crate) static ALL: [&dyn BackendPlugin; 4] = [
    &::host::PLUGIN,
    &::local::PLUGIN,
    &tensorlake::PLUGIN,
    &modal::PLUGIN,
];

/// The backend called `name`, if this build has one.
pub(crate) fn find(name: &str) -> Option<&'static dyn BackendPlugin> {
    ALL.iter().copied().find(|b| b.name() == name)
}

/// The names, for help texts: "host, local, tensorlake or modal".
pub(crate) fn names() -> String {
    let names: Vec<&str> = ALL.iter().map(|b| b.name()).collect();
    common::settings::or_list(&names)
}

/// `backend` configured from this process's environment and the settings
/// file (`config`, else the default one if it exists), for commands other
/// than `serve` (which resolves its backends with everything else).
/// `Ok(None)` when the backend is not configured at all.
pub(crate) fn configure_from_environment(
    backend: &dyn BackendPlugin,
    config: Option<&Path>,
) -> anyhow::Result<Option<Arc<dyn ConfiguredBackend>>> {
    match configure(backend, config)? {
        Ok(configured) => Ok(Some(configured)),
        Err(SettingsError::Missing(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The same, with "not configured at all" an error saying what to set.
pub(super) fn configure_required(
    backend: &dyn BackendPlugin,
    config: Option<&Path>,
) -> anyhow::Result<Arc<dyn ConfiguredBackend>> {
    Ok(configure(backend, config)??)
}

/// The settings file's errors, then the backend's own.
fn configure(
    backend: &dyn BackendPlugin,
    config: Option<&Path>,
) -> anyhow::Result<Result<Arc<dyn ConfiguredBackend>, SettingsError>> {
    let host = HostEnv::current();
    let file = match settings_file(&host, config) {
        Some(path) => settings::load_file(&path, &ALL)?.unwrap_or_default(),
        None => RawSettings::default(),
    };
    Ok(backend.configure(&BackendSource::new(&host, &file.backend_keys)))
}

/// Each backend with what a session gets, for `--help`: "host (no
/// isolation: ...), local (...), ...".
pub(crate) fn help() -> String {
    let described: Vec<String> = ALL
        .iter()
        .map(|b| format!("{} ({})", b.name(), b.summary()))
        .collect();
    common::settings::or_list(&described)
}

/// The settings file to read: `explicit`, else the default one if it exists.
pub(crate) fn settings_file(host: &HostEnv, explicit: Option<&Path>) -> Option<std::path::PathBuf> {
    if let Some(path) = explicit {
        return Some(path.to_owned());
    }
    let path = host.config_file_path().ok()?;
    path.exists().then_some(path)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn names_are_unique_and_the_default_is_registered() {
        let mut seen = std::collections::BTreeSet::new();
        for backend in &ALL {
            assert!(seen.insert(backend.name()), "{} twice", backend.name());
        }
        assert!(find(settings::DEFAULT_BACKEND).is_some());
        assert_eq!(names(), "host, local, tensorlake or modal");
    }

    #[test]
    fn no_two_backends_claim_one_file_key() {
        let mut owner = BTreeMap::new();
        for backend in &ALL {
            for key in backend.file_keys() {
                if let Some(other) = owner.insert(*key, backend.name()) {
                    panic!("{key} is claimed by {other} and {}", backend.name());
                }
            }
        }
    }

    #[test]
    fn each_backends_file_keys_are_its_declared_settings() {
        for backend in &ALL {
            let declared: Vec<&str> = backend
                .settings()
                .iter()
                .filter(|s| s.in_file)
                .map(|s| s.name)
                .collect();
            assert_eq!(backend.file_keys(), declared, "{}", backend.name());
            for setting in backend.settings() {
                assert!(setting.env.is_some(), "{} has no variable", setting.name);
                assert!(
                    !(setting.secret && (setting.in_file || setting.flag.is_some())),
                    "{} is a secret in the file or argv",
                    setting.name
                );
            }
        }
    }

    /// `packaging/garrison.toml.example` is the text the tables generate.
    /// `GARRISON_UPDATE_EXAMPLE=1 cargo test -p garrison example_file`
    /// rewrites it.
    #[test]
    fn the_packaged_example_file_is_generated_from_the_settings_tables() {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/garrison.toml.example");
        let generated = settings::example_file(&ALL);
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        if committed != generated && std::env::var_os("GARRISON_UPDATE_EXAMPLE").is_some() {
            std::fs::write(&path, &generated).expect("rewrite the example");
            return;
        }
        assert!(
            committed == generated,
            "{} is not what the settings tables generate; run \
             GARRISON_UPDATE_EXAMPLE=1 cargo test -p garrison example_file",
            path.display()
        );

        // Every setting of every table is in it, with its values.
        let words = generated
            .lines()
            .map(|l| l.trim_start_matches('#').trim())
            .collect::<Vec<_>>()
            .join(" ");
        let all = settings::names::ALL
            .iter()
            .chain(ALL.iter().flat_map(|b| b.settings()));
        for setting in all {
            if setting.in_file {
                assert!(
                    generated.contains(&format!("\n{} = ", setting.name))
                        || generated.contains(&format!("\n# {} = ", setting.name)),
                    "no line for {}",
                    setting.name
                );
            }
            if let Some(values) = setting.kind.describe() {
                assert!(words.contains(&values), "{}: no {values:?}", setting.name);
            }
            if setting.in_file || setting.secret {
                let var = setting.env.expect("a variable");
                assert!(words.contains(var), "{}: no {var}", setting.name);
            }
        }

        // And it is a valid file: its values resolve.
        let h = host(&[("DEVIN_OUTPOSTS_TOKEN", "cog_x")]);
        resolve(&h, &generated).expect("the example resolves");
    }

    fn host(vars: &[(&str, &str)]) -> HostEnv {
        HostEnv::new(
            1000,
            vars.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .chain([("HOME".to_owned(), "/nonexistent-home".to_owned())])
                .collect(),
        )
    }

    const FILE: &str = "/etc/garrison/garrison.toml";

    fn resolve(
        host: &HostEnv,
        file_text: &str,
    ) -> Result<orchestrator::settings::ServeConfig, SettingsError> {
        let file = settings::parse_file(Path::new(FILE), file_text, &ALL)?;
        let raw = RawSettings::from_env(host).or(file);
        settings::resolve(raw, None, host, &ALL)
    }

    const TL_KEY: &str = "tl_test_key_do_not_print_0123456789";

    #[test]
    fn tensorlake_settings_come_from_the_environment_and_the_file() {
        let h = host(&[
            ("DEVIN_OUTPOSTS_TOKEN", "cog_x"),
            ("OUTPOST_ID", "op-1"),
            ("TENSORLAKE_API_KEY", TL_KEY),
        ]);
        let config = resolve(
            &h,
            "backend = \"tensorlake\"\ntensorlake_image = \"img\"\nsandbox_timeout_secs = 60\n",
        )
        .unwrap();
        let tl = format!("{:?}", config.backends["tensorlake"]);
        assert!(
            tl.contains("image: Some(\"img\")") && tl.contains("timeout_secs: 60"),
            "{tl}"
        );
        assert!(!tl.contains(TL_KEY));
        let secrets: Vec<String> = config.backends["tensorlake"]
            .secrets()
            .iter()
            .map(|s| s.expose().to_owned())
            .collect();
        assert_eq!(secrets, [TL_KEY]);

        let message = resolve(&h, "tensorlake_api_key = \"x\"")
            .unwrap_err()
            .to_string();
        assert!(message.contains("TENSORLAKE_API_KEY"), "{message}");
        assert!(message.contains("never from this file"), "{message}");

        // Only an outpost on Tensorlake needs its key.
        let without = host(&[("DEVIN_OUTPOSTS_TOKEN", "cog_x"), ("OUTPOST_ID", "op-1")]);
        assert!(resolve(&without, "backend = \"host\"\n").is_ok());
        let message = resolve(&without, "backend = \"tensorlake\"\n")
            .unwrap_err()
            .to_string();
        assert!(message.contains("TENSORLAKE_API_KEY"), "{message}");
    }

    #[test]
    fn modal_settings_are_resolved_once_and_only_for_modal_outposts() {
        let base = [("DEVIN_OUTPOSTS_TOKEN", "cog_x"), ("OUTPOST_ID", "op-1")];
        assert!(
            !resolve(&host(&base), "backend = \"host\"\n")
                .unwrap()
                .backends
                .contains_key("modal")
        );
        let mut vars = base.to_vec();
        vars.extend([
            ("MODAL_TOKEN_ID", "ak-settings-test"),
            ("MODAL_TOKEN_SECRET", "as-settings-test"),
            ("MODAL_REGION", "us-east"),
        ]);
        let config = resolve(&host(&vars), "backend = \"modal\"\n").unwrap();
        let modal = format!("{:?}", config.backends["modal"]);
        assert!(
            modal.contains("us-east") && !modal.contains("as-settings-test"),
            "{modal}"
        );
        assert_eq!(config.backends["modal"].secrets().len(), 2);

        // Half a token stops `serve` at start, naming the missing setting.
        let mut half = base.to_vec();
        half.push(("MODAL_TOKEN_ID", "ak-settings-test"));
        let error = resolve(&host(&half), "backend = \"modal\"\n")
            .unwrap_err()
            .to_string();
        assert!(error.contains("MODAL_TOKEN_SECRET"), "{error}");

        // Its settings are keys of the file too, below the environment.
        let config = resolve(
            &host(&vars),
            "backend = \"modal\"\nmodal_region = \"eu-west\"\nmodal_image = \"im-file\"\n",
        )
        .unwrap();
        let modal = format!("{:?}", config.backends["modal"]);
        assert!(
            modal.contains("us-east") && modal.contains("im-file"),
            "{modal}"
        );
        let error = resolve(
            &host(&vars),
            "backend = \"modal\"\nmodal_sandbox_runtime = \"firecracker\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            error.contains(&format!("modal_sandbox_runtime in {FILE}")),
            "{error}"
        );
        // The token never is.
        let error = resolve(&host(&vars), "modal_token_secret = \"x\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("MODAL_TOKEN_SECRET") && error.contains("never from this file"),
            "{error}"
        );
    }
}
