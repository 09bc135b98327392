//! The session image on Modal: the local backend's TOML recipe translated
//! into Dockerfile commands, built with `ImageGetOrCreate` and
//! `ImageJoinStreaming`, and the resulting image id cached by name and by
//! a hash of the recipe.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow, bail};
use sandbox::{Recipe, format};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::client::Client;
use crate::wire::{self, generic_result::GenericStatus};

/// The Modal app that image builds are attached to.
pub const IMAGE_APP: &str = "garrison-images";

/// The Dockerfile of a recipe: Debian's slim image of the recipe's suite,
/// then each of [`Recipe::shell_steps`] (its packages, with Chromium and
/// ffmpeg when asked for, in one layer, then each step) as its own `RUN`
/// with `sh -e`, as the local backend runs them.
pub fn dockerfile_commands(recipe: &Recipe) -> anyhow::Result<Vec<String>> {
    let mut commands = vec![format!("FROM debian:{}-slim", recipe.suite)];
    commands.extend(recipe.shell_steps()?.iter().map(|step| run(&step.script)));
    Ok(commands)
}

/// `RUN` in exec form, so a step's quotes and newlines reach `sh` intact.
fn run(script: &str) -> String {
    let argv = serde_json::json!(["/bin/sh", "-ec", script]);
    format!("RUN {argv}")
}

/// What the cache is keyed by: the commands actually sent, and the builder
/// version they are built with.
pub fn recipe_key(commands: &[String]) -> String {
    let mut hasher = Sha256::new();
    hasher.update(wire::IMAGE_BUILDER_VERSION.as_bytes());
    for command in commands {
        hasher.update(b"\0");
        hasher.update(command.as_bytes());
    }
    hex::encode(hasher.finalize())
}

/// `<state>/modal/images.json`: image ids by recipe key, and which key each
/// name points at. Written with mode 0600 (it names the account's images).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ImageCache {
    /// Image id by [`recipe_key`].
    #[serde(default)]
    pub by_recipe: BTreeMap<String, String>,
    /// Recipe key by image name.
    #[serde(default)]
    pub names: BTreeMap<String, String>,
}

impl ImageCache {
    /// Where the cache of a state directory lives.
    pub fn path(state_dir: &Path) -> PathBuf {
        state_dir.join("modal").join("images.json")
    }

    /// The cache at `path`, empty when there is none.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        match std::fs::read(path) {
            Ok(bytes) if bytes.len() <= 4 * 1024 * 1024 => {
                format::MODAL_IMAGES.check(path, &bytes)?;
                serde_json::from_slice(&bytes)
                    .with_context(|| format!("reading {}", path.display()))
            }
            Ok(_) => bail!("{} is too large to be an image cache", path.display()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(anyhow!(e).context(format!("reading {}", path.display()))),
        }
    }

    /// Writes the cache atomically with mode 0600.
    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        let dir = path.parent().context("cache path has no directory")?;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("creating {}", dir.display()))?;
        let tmp = dir.join(format!(".images.{:016x}.tmp", rand::random::<u64>()));
        let written = (|| {
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            file.write_all(&format::MODAL_IMAGES.to_vec_pretty(self)?)?;
            file.sync_all()?;
            std::fs::rename(&tmp, path)
        })();
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written.with_context(|| format!("writing {}", path.display()))
    }

    /// The image id a name was built as.
    pub fn image_for(&self, name: &str) -> Option<&str> {
        self.by_recipe
            .get(self.names.get(name)?)
            .map(String::as_str)
    }
}

/// Whether `image` is a Modal image id rather than a name.
pub fn is_image_id(image: &str) -> bool {
    image.starts_with("im-")
}

/// What a build did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Built {
    /// The Modal image id (`im-...`).
    pub image_id: String,
    /// The cache already had a live image for this recipe.
    pub reused: bool,
}

/// Builds `recipe` on Modal as `name` (or reuses the cached image of the
/// same recipe when Modal still has it), and records it in the cache at
/// `cache_path`. `log` receives the build's output lines.
pub async fn build(
    client: &Client,
    name: &str,
    recipe: &Recipe,
    cache_path: &Path,
    mut log: impl FnMut(&str),
) -> anyhow::Result<Built> {
    if name.is_empty()
        || name.len() > 64
        || is_image_id(name)
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        bail!("image name {name:?}: use letters, digits, '-', '_' and '.', not starting with im-");
    }
    let commands = dockerfile_commands(recipe)?;
    let key = recipe_key(&commands);
    let mut cache = ImageCache::load(cache_path)?;
    if let Some(image_id) = cache.by_recipe.get(&key).cloned()
        && exists(client, &image_id).await?
    {
        cache.names.insert(name.to_owned(), key);
        cache.save(cache_path)?;
        return Ok(Built {
            image_id,
            reused: true,
        });
    }
    let app_id = client
        .retrying("AppGetOrCreate", |mut rpc| async move {
            rpc.app_get_or_create(wire::AppGetOrCreateRequest {
                app_name: IMAGE_APP.to_owned(),
                environment_name: String::new(),
                object_creation_type: wire::ObjectCreationType::CreateIfMissing as i32,
            })
            .await
        })
        .await
        .context("looking up the Modal app for images")?
        .app_id;
    let request = wire::ImageGetOrCreateRequest {
        image: Some(wire::Image {
            base_images: Vec::new(),
            dockerfile_commands: commands,
        }),
        app_id,
        force_build: false,
        builder_version: wire::IMAGE_BUILDER_VERSION.to_owned(),
    };
    let created = client
        .retrying("ImageGetOrCreate", |mut rpc| {
            let request = request.clone();
            async move { rpc.image_get_or_create(request).await }
        })
        .await
        .context("starting the image build on Modal")?;
    let image_id = created.image_id;
    let mut result = created.result.filter(is_final);
    let mut last_entry_id = String::new();
    while result.is_none() {
        let request = wire::ImageJoinStreamingRequest {
            image_id: image_id.clone(),
            timeout: 55.0,
            last_entry_id: last_entry_id.clone(),
            include_logs_for_finished: true,
        };
        let mut stream = client
            .retrying("ImageJoinStreaming", |mut rpc| {
                let request = request.clone();
                async move { rpc.image_join_streaming(request).await }
            })
            .await
            .context("following the image build")?;
        loop {
            let item = match stream.message().await {
                Ok(Some(item)) => item,
                Ok(None) => break,
                Err(s) if wire::is_retryable(s.code()) => break,
                Err(s) => return Err(anyhow!("following the image build: {s}")),
            };
            if !item.entry_id.is_empty() {
                last_entry_id = item.entry_id;
            }
            for line in item.task_logs.iter().flat_map(|l| l.data.lines()) {
                log(line);
            }
            if let Some(r) = item.result.filter(is_final) {
                result = Some(r);
                break;
            }
        }
    }
    let result = result.unwrap_or_default();
    if result.status != GenericStatus::Success as i32 {
        bail!(
            "the image build {image_id} ended with {}: {}",
            describe_status(result.status),
            result.exception
        );
    }
    cache.by_recipe.insert(key.clone(), image_id.clone());
    cache.names.insert(name.to_owned(), key);
    cache.save(cache_path)?;
    Ok(Built {
        image_id,
        reused: false,
    })
}

/// Whether a build result is the end of the build: any status but
/// "unspecified", read from the raw value. prost reads a value this version
/// does not know (a newer failure, say `KERNEL_OOM_KILL`) as unspecified,
/// which would keep the build followed forever.
fn is_final(result: &wire::GenericResult) -> bool {
    result.status != GenericStatus::Unspecified as i32
}

/// A status by name, or by number when this version does not know it.
fn describe_status(raw: i32) -> String {
    match GenericStatus::try_from(raw) {
        Ok(status) => format!("{status:?}"),
        Err(_) => format!("status {raw} (unknown to this version of Garrison)"),
    }
}

async fn exists(client: &Client, image_id: &str) -> anyhow::Result<bool> {
    let request = wire::ImageFromIdRequest {
        image_id: image_id.to_owned(),
    };
    match client
        .retrying("ImageFromId", |mut rpc| {
            let request = request.clone();
            async move { rpc.image_from_id(request).await }
        })
        .await
    {
        Ok(_) => Ok(true),
        Err(s) if s.code() == tonic::Code::NotFound => Ok(false),
        Err(s) => Err(anyhow!("looking up image {image_id}: {s}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recipe_becomes_dockerfile_commands() {
        let mut recipe = Recipe::default_recipe();
        recipe.packages = vec!["python3".into()];
        recipe.steps = vec!["echo 'hi there'\nuseradd -m dev".into()];
        recipe.chromium = true;
        recipe.ffmpeg = true;
        let commands = dockerfile_commands(&recipe).unwrap();
        assert_eq!(commands[0], "FROM debian:bookworm-slim");
        assert!(commands[1].starts_with("RUN [\"/bin/sh\",\"-ec\",\"apt-get update"));
        for package in ["ca-certificates", "git", "python3", "chromium", "ffmpeg"] {
            assert!(
                commands[1].contains(&format!(" {package} ")),
                "{package}: {}",
                commands[1]
            );
        }
        assert_eq!(
            commands[2],
            r#"RUN ["/bin/sh","-ec","echo 'hi there'\nuseradd -m dev"]"#
        );
        recipe.mirror = Some("https://mirror.example/debian".into());
        let commands = dockerfile_commands(&recipe).unwrap();
        assert!(commands[1].contains("deb https://mirror.example/debian bookworm main"));
    }

    #[test]
    fn any_known_or_unknown_status_but_unspecified_ends_the_build() {
        let result = |status: i32| wire::GenericResult {
            status,
            ..Default::default()
        };
        assert!(!is_final(&result(0)));
        for status in [1, 2, 8] {
            assert!(is_final(&result(status)), "{status}");
        }
        // 9 and 10 are MEMORY_THRASHING_EVICTION and KERNEL_OOM_KILL in
        // newer clients: a failure, not "still building". The typed reading
        // cannot tell them from unspecified, so the raw value decides.
        assert_eq!(result(9).status(), GenericStatus::Unspecified);
        for status in [9, 10, 99] {
            assert!(is_final(&result(status)), "{status}");
            assert!(describe_status(status).contains(&format!("status {status}")));
        }
        assert_eq!(describe_status(2), "Failure");
    }

    #[test]
    fn the_key_changes_with_the_recipe() {
        let a = dockerfile_commands(&Recipe::default_recipe()).unwrap();
        let mut other = Recipe::default_recipe();
        other.ffmpeg = true;
        let b = dockerfile_commands(&other).unwrap();
        assert_eq!(recipe_key(&a), recipe_key(&a.clone()));
        assert_ne!(recipe_key(&a), recipe_key(&b));
    }

    #[test]
    fn the_cache_is_private_and_maps_names_to_ids() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = ImageCache::path(dir.path());
        assert_eq!(ImageCache::load(&path).unwrap(), ImageCache::default());
        let mut cache = ImageCache::default();
        cache.by_recipe.insert("k".into(), "im-1".into());
        cache.names.insert("default".into(), "k".into());
        cache.save(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let loaded = ImageCache::load(&path).unwrap();
        assert_eq!(loaded.image_for("default"), Some("im-1"));
        assert_eq!(loaded.image_for("other"), None);
    }

    #[test]
    fn caches_without_a_format_read_and_newer_ones_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = ImageCache::path(dir.path());
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        // As releases before formats wrote it.
        std::fs::write(
            &path,
            r#"{"by_recipe":{"k":"im-1"},"names":{"default":"k"}}"#,
        )
        .unwrap();
        assert_eq!(
            ImageCache::load(&path).unwrap().image_for("default"),
            Some("im-1")
        );
        let newer = r#"{"format":999,"by_recipe":{"k":"im-1"},"names":{"default":"k"}}"#;
        std::fs::write(&path, newer).unwrap();
        let message = format!("{:#}", ImageCache::load(&path).unwrap_err());
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert!(message.contains("a newer Garrison wrote it"), "{message}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), newer);
    }
}
