//! `garrison image import`: an OCI image layout (a directory, or a tar of
//! one) or a `docker save` tarball becomes a read-only image.
//!
//! The work happens in three passes so that nothing untrusted is unpacked
//! before it is checked:
//!
//! 1. a tarball is unpacked into the store's `tmp/` (the tar crate keeps
//!    every entry inside that directory);
//! 2. `verify`: every layer blob is hashed; where the manifest names a
//!    digest (OCI, and `docker save` of Docker 25+) it must match. The
//!    digests make the image id, so an image imported before is not
//!    unpacked again;
//! 3. `layer i/n`: each layer is applied in order with whiteouts
//!    ([`super::layer`]); gzip, zstd and plain tar layers are told apart by
//!    their magic bytes rather than trusting media types.
//!
//! The image config (entrypoint, environment) is not used: sessions run
//! `devin-remote` with an exact environment of Garrison's.

use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::info::write_image_info;
use super::layer;
use super::names::{id_from_digest, validate_name};
use super::progress::{self, CountingReader};
use super::store::ImageStore;
use super::{Image, Progress, tree};

impl ImageStore {
    /// Imports an OCI image layout (directory or tar) or a `docker save`
    /// tarball and names it `name`. See the module documentation.
    pub async fn import(
        &self,
        name: &str,
        file: &Path,
        progress: &dyn Progress,
    ) -> anyhow::Result<Image> {
        import(self, name, file, progress).await
    }
}

async fn import(
    store: &ImageStore,
    name: &str,
    file: &Path,
    progress: &dyn Progress,
) -> anyhow::Result<Image> {
    validate_name(name)?;
    let (store, name, file) = (store.clone(), name.to_owned(), file.to_owned());
    progress::blocking(progress, move |p| {
        import_blocking(&store, &name, &file, p)
            .with_context(|| format!("importing {}", file.display()))
    })
    .await
}

fn import_blocking(
    store: &ImageStore,
    name: &str,
    file: &Path,
    p: &dyn Progress,
) -> anyhow::Result<Image> {
    let meta = fs::metadata(file).with_context(|| format!("reading {}", file.display()))?;
    let work = store.temp_dir()?;
    let source = if meta.is_dir() {
        file.to_owned()
    } else {
        p.stage("unpack");
        let dir = work.path().join("source");
        fs::create_dir(&dir)?;
        let reader = decompress(CountingReader::new(
            fs::File::open(file)?,
            p,
            0,
            Some(meta.len()),
        ))?;
        tar::Archive::new(reader)
            .unpack(&dir)
            .with_context(|| format!("unpacking {}", file.display()))?;
        dir
    };
    let layers = find_layers(&source)?;

    p.stage("verify");
    let total = layers
        .iter()
        .map(|l| fs::metadata(&l.path).map(|m| m.len()).unwrap_or(0))
        .sum();
    let mut id_hasher = Sha256::new();
    id_hasher.update(b"garrison-image-v1\nimport\n");
    let mut done = 0;
    for layer in &layers {
        let mut reader = CountingReader::new(fs::File::open(&layer.path)?, p, done, Some(total));
        let mut hasher = Sha256::new();
        std::io::copy(&mut reader, &mut hasher)
            .with_context(|| format!("reading {}", layer.path.display()))?;
        done = reader.done;
        let digest = hex::encode(hasher.finalize());
        if let Some(expected) = &layer.digest
            && *expected != digest
        {
            bail!(
                "layer {} is corrupt: its sha256 is {digest}, the manifest says {expected}",
                layer.path.display()
            );
        }
        id_hasher.update(format!("{digest}\n").as_bytes());
    }
    let id = id_from_digest(&id_hasher.finalize());
    let file_name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut image = Image {
        id: id.clone(),
        name: name.to_owned(),
        rootfs: PathBuf::new(),
        created_at_ms: chrono::Utc::now().timestamp_millis(),
        size_bytes: 0,
        chrome_path: None,
        xvfb_path: None,
        source: format!("import:{file_name}"),
    };
    if store.has(&id) {
        // Same layers as an image we have: only the name moves.
        return store.install(work, image);
    }

    let rootfs = work.rootfs();
    fs::create_dir(&rootfs)?;
    let count = layers.len();
    let mut done = 0;
    for (i, layer) in layers.iter().enumerate() {
        p.stage(&format!("layer {}/{count}", i + 1));
        let mut counting = CountingReader::new(fs::File::open(&layer.path)?, p, done, Some(total));
        let what = format!("layer {}/{count} ({})", i + 1, layer.path.display());
        layer::apply(&rootfs, decompress(&mut counting)?, &what)?;
        done = counting.done;
    }
    if source.starts_with(work.path()) {
        fs::remove_dir_all(&source)?;
    }

    p.stage("finalize");
    image.chrome_path = sandbox::CHROME_CANDIDATES
        .iter()
        .find(|path| layer::resolve_existing(&rootfs, Path::new(path)).is_ok())
        .map(|path| (*path).to_owned());
    image.xvfb_path = [sandbox::XVFB_PATH]
        .into_iter()
        .find(|path| layer::resolve_existing(&rootfs, Path::new(path)).is_ok())
        .map(str::to_owned);
    write_image_info(&rootfs, &image)?;
    image.size_bytes = tree::walk(&rootfs, false, p)?.size_bytes;
    store.install(work, image)
}

/// A tar stream, gzip- or zstd-compressed or plain, told apart by magic.
fn decompress<'a>(reader: impl Read + 'a) -> anyhow::Result<Box<dyn Read + 'a>> {
    let mut buffered = BufReader::with_capacity(1 << 16, reader);
    let head = buffered.fill_buf()?;
    Ok(if head.starts_with(&[0x1f, 0x8b]) {
        Box::new(flate2::bufread::MultiGzDecoder::new(buffered))
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Box::new(zstd::stream::read::Decoder::with_buffer(buffered)?)
    } else {
        Box::new(buffered)
    })
}

/// One layer blob, and its digest when the manifest names one.
struct LayerRef {
    path: PathBuf,
    digest: Option<String>,
}

fn find_layers(dir: &Path) -> anyhow::Result<Vec<LayerRef>> {
    // Docker 25+ writes both; manifest.json is the simpler to follow.
    let layers = if dir.join("manifest.json").is_file() {
        docker_layers(dir)?
    } else if dir.join("index.json").is_file() {
        oci_layers(dir)?
    } else {
        bail!("found neither manifest.json (docker save) nor index.json (OCI image layout)");
    };
    if layers.is_empty() {
        bail!("the image has no layers");
    }
    Ok(layers)
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DockerManifest {
    layers: Vec<String>,
}

fn docker_layers(dir: &Path) -> anyhow::Result<Vec<LayerRef>> {
    let manifests: Vec<DockerManifest> = read_json(&dir.join("manifest.json"))?;
    let manifest = match manifests.as_slice() {
        [one] => one,
        [] => bail!("manifest.json lists no image"),
        many => bail!(
            "manifest.json lists {} images; save and import one at a time",
            many.len()
        ),
    };
    manifest
        .layers
        .iter()
        .map(|rel| {
            let path = layer::resolve_existing(dir, Path::new(rel))
                .with_context(|| format!("manifest.json: layer {rel}"))?;
            // Docker 25+ names layers by digest: check it.
            let digest = rel
                .strip_prefix("blobs/sha256/")
                .filter(|hex| hex.len() == 64)
                .map(str::to_owned);
            Ok(LayerRef { path, digest })
        })
        .collect()
}

#[derive(Deserialize)]
struct Descriptor {
    digest: String,
    #[serde(default)]
    platform: Option<Platform>,
}

#[derive(Deserialize)]
struct Platform {
    architecture: String,
    os: String,
}

fn oci_layers(dir: &Path) -> anyhow::Result<Vec<LayerRef>> {
    let mut doc: serde_json::Value = read_json(&dir.join("index.json"))?;
    // An index may point at further indexes (multi-platform images).
    for _ in 0..4 {
        if let Some(layers) = doc.get("layers") {
            let layers: Vec<Descriptor> =
                serde_json::from_value(layers.clone()).context("reading the manifest's layers")?;
            return layers
                .iter()
                .map(|d| {
                    let (path, hex) = blob(dir, &d.digest)?;
                    Ok(LayerRef {
                        path,
                        digest: Some(hex),
                    })
                })
                .collect();
        }
        let manifests: Vec<Descriptor> = serde_json::from_value(
            doc.get("manifests")
                .cloned()
                .context("neither layers nor manifests in an index or manifest")?,
        )
        .context("reading an index's manifests")?;
        let chosen = pick_platform(&manifests)?;
        doc = read_json(&blob(dir, &chosen.digest)?.0)?;
    }
    bail!("indexes nested too deeply")
}

/// The manifest for this machine: one without a platform, or linux on
/// this architecture (attestations, `unknown/unknown`, are skipped).
fn pick_platform(manifests: &[Descriptor]) -> anyhow::Result<&Descriptor> {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    manifests
        .iter()
        .find(|d| {
            d.platform
                .as_ref()
                .is_none_or(|p| p.os == "linux" && p.architecture == arch)
        })
        .with_context(|| {
            let offered: Vec<String> = manifests
                .iter()
                .filter_map(|d| d.platform.as_ref())
                .map(|p| format!("{}/{}", p.os, p.architecture))
                .collect();
            format!(
                "no linux/{arch} image in the index (it has: {})",
                offered.join(", ")
            )
        })
}

/// The path of a blob in an OCI layout, and its hex digest.
fn blob(dir: &Path, digest: &str) -> anyhow::Result<(PathBuf, String)> {
    let hex = digest
        .strip_prefix("sha256:")
        .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        .with_context(|| format!("unsupported digest {digest:?} (expected sha256:<hex>)"))?;
    let path = layer::resolve_existing(dir, &Path::new("blobs/sha256").join(hex))
        .with_context(|| format!("blob {digest}"))?;
    Ok((path, hex.to_ascii_lowercase()))
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> anyhow::Result<T> {
    let bytes = fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_slice(&bytes).with_context(|| format!("parsing {}", path.display()))
}

#[cfg(test)]
#[path = "import_tests.rs"]
mod tests;
