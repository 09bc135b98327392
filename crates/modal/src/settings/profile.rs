//! A profile of Modal's own configuration file (`~/.modal.toml`, or
//! `MODAL_CONFIG_PATH`): the token, `server_url` and `environment`, read
//! as Modal's client reads them.

use std::path::{Path, PathBuf};

use common::settings::{SettingsError, read_owner_only_if_present};

use super::{PROFILE_ENV, pair};

/// What a profile holds that Garrison uses.
#[derive(Clone, Debug, Default)]
pub(super) struct Profile {
    /// `token_id` and `token_secret`, when both are there.
    pub credentials: Option<crate::Credentials>,
    /// `server_url`: Modal's API.
    pub server_url: Option<String>,
    /// `environment`: the Modal environment apps and sandboxes live in.
    pub environment: Option<String>,
    /// The file it was read from.
    pub path: Option<PathBuf>,
}

/// The profile `profile` if given, else the one marked `active = true`,
/// else the only one. `Ok(None)` when there is no file. Like Garrison's own
/// credentials, a file other users may read is refused.
pub(super) fn read(path: &Path, profile: Option<&str>) -> Result<Option<Profile>, SettingsError> {
    let Some(text) = read_owner_only_if_present(path, u64::MAX)? else {
        return Ok(None);
    };
    let parse = |reason: String| SettingsError::Parse {
        path: path.to_owned(),
        reason,
    };
    // Never echo toml's message: it may quote a line holding the secret.
    let table: toml::Table = toml::from_str(&text).map_err(|_| parse("not valid TOML".into()))?;
    let profiles: Vec<(&String, &toml::Table)> = table
        .iter()
        .filter_map(|(name, value)| value.as_table().map(|t| (name, t)))
        .collect();
    let chosen = match profile {
        Some(wanted) => profiles.iter().find(|(name, _)| name.as_str() == wanted),
        None => profiles
            .iter()
            .find(|(_, t)| t.get("active").and_then(toml::Value::as_bool) == Some(true))
            .or(if profiles.len() == 1 {
                profiles.first()
            } else {
                None
            }),
    };
    let Some((name, table)) = chosen else {
        return Err(parse(match profile {
            Some(wanted) => format!("no profile [{wanted}] ({PROFILE_ENV})"),
            None => format!("several profiles and none is active; set {PROFILE_ENV}"),
        }));
    };
    let field = |key: &str| {
        table
            .get(key)
            .and_then(toml::Value::as_str)
            .filter(|v| !v.is_empty())
    };
    let credentials = match (field("token_id"), field("token_secret")) {
        (Some(id), Some(secret)) => Some(pair(id, secret)),
        (None, None) => None,
        _ => {
            return Err(parse(format!(
                "profile [{name}] has only one of token_id and token_secret"
            )));
        }
    };
    Ok(Some(Profile {
        credentials,
        server_url: field("server_url").map(str::to_owned),
        environment: field("environment").map(str::to_owned),
        path: Some(path.to_owned()),
    }))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::OpenOptionsExt;

    use super::super::{ENVIRONMENT_ENV, SERVER_URL_ENV, TOKEN_ID_ENV, TOKEN_SECRET_ENV, resolve};

    fn source(home: &str, vars: &[(&str, &str)]) -> common::settings::MapSource {
        let mut source = common::settings::MapSource::vars(vars);
        source.home = Some(home.into());
        source
    }

    fn home_with(text: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(dir.path().join(".modal.toml"))
            .unwrap();
        std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
        dir
    }

    #[test]
    fn server_url_and_environment_come_from_the_profile_unless_the_environment_says() {
        let dir = home_with(
            "[p]\ntoken_id = \"ak-p\"\ntoken_secret = \"as-p\"\nserver_url = \"http://127.0.0.1:7/\"\nenvironment = \"staging\"\n",
        );
        let home = dir.path().to_str().unwrap();
        let with = |extra: &[(&str, &str)]| resolve(&source(home, extra)).unwrap();
        let m = with(&[]);
        assert_eq!(m.api_url, "http://127.0.0.1:7");
        assert_eq!(m.environment.as_deref(), Some("staging"));
        assert_eq!(m.credentials.token_id.expose(), "ak-p");
        let m = with(&[
            (SERVER_URL_ENV, "http://127.0.0.1:8"),
            (ENVIRONMENT_ENV, "prod"),
            (TOKEN_ID_ENV, "ak-e"),
            (TOKEN_SECRET_ENV, "as-e"),
        ]);
        assert_eq!(m.api_url, "http://127.0.0.1:8");
        assert_eq!(m.environment.as_deref(), Some("prod"));
        assert_eq!(m.credentials.token_id.expose(), "ak-e");
    }

    #[test]
    fn a_profile_without_a_token_still_gives_its_server_url_to_a_token_from_the_environment() {
        let dir = home_with("[p]\nserver_url = \"http://127.0.0.1:9\"\n");
        let home = dir.path().to_str().unwrap();
        let m = resolve(&source(
            home,
            &[(TOKEN_ID_ENV, "ak-e"), (TOKEN_SECRET_ENV, "as-e")],
        ))
        .unwrap();
        assert_eq!(m.api_url, "http://127.0.0.1:9");
        let no_token = resolve(&source(home, &[]));
        assert!(
            no_token
                .unwrap_err()
                .to_string()
                .contains("modal token new")
        );
    }
}
