//! The image store on disk: content under `store/<id>`, names under
//! `names/<name>`, work in progress under `tmp/`. See the parent module for
//! the layout and why every change is a rename.

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow, bail};
use sandbox::format;

use super::Image;
use super::names::{is_id_like, validate_id, validate_name};

const STORE_DIR: &str = "store";
const NAMES_DIR: &str = "names";
const TMP_DIR: &str = "tmp";
const META_FILE: &str = "image.json";
const ROOTFS_DIR: &str = "rootfs";

/// The images of one Garrison state directory (`<state>/images`).
#[derive(Clone, Debug)]
pub struct ImageStore {
    root: PathBuf,
}

impl ImageStore {
    /// Opens (creating if needed) the store at `root`, and removes what
    /// builds and imports of dead processes left in `tmp/`.
    pub fn open(root: &Path) -> anyhow::Result<Self> {
        for dir in [
            root.join(STORE_DIR),
            root.join(NAMES_DIR),
            root.join(TMP_DIR),
        ] {
            fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        // Containers read the trees; only root may change them.
        fs::set_permissions(root, fs::Permissions::from_mode(0o755))
            .with_context(|| format!("setting the mode of {}", root.display()))?;
        let store = Self {
            root: root.to_owned(),
        };
        store.clean_tmp();
        Ok(store)
    }

    /// The store's directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A name → the image it points at now; an id (or a unique prefix of
    /// at least 12 hex digits) → that exact image, even after every name
    /// moved on.
    pub fn resolve(&self, name_or_id: &str) -> anyhow::Result<Image> {
        if is_id_like(name_or_id) {
            let id = self.full_id(name_or_id)?;
            return self.load(&id);
        }
        let id = self.name_target(name_or_id)?.ok_or_else(|| {
            anyhow!(
                "no image named {name_or_id:?} in {} (build one with `garrison image build {name_or_id}`)",
                self.root.display()
            )
        })?;
        let mut image = self.load(&id)?;
        image.name = name_or_id.to_owned();
        Ok(image)
    }

    /// Every named image (one entry per name, sorted by name), then the
    /// images no name points at any more (kept for sessions or snapshots
    /// made on them) with an empty `name`.
    pub fn list(&self) -> anyhow::Result<Vec<Image>> {
        let mut images = Vec::new();
        let mut named = std::collections::BTreeSet::new();
        for (name, id) in self.names()? {
            match self.load(&id) {
                Ok(mut image) => {
                    image.name = name;
                    named.insert(id);
                    images.push(image);
                }
                Err(err) => tracing::warn!("image name {name:?}: {err:#}"),
            }
        }
        for id in self.ids()? {
            if !named.contains(&id) {
                let mut image = self.load(&id)?;
                image.name = String::new();
                images.push(image);
            }
        }
        Ok(images)
    }

    /// Removes a name (and its content when no other name points at it),
    /// or an id (with every name pointing at it). Refused while `in_use`
    /// says a session or snapshot uses the image.
    pub fn remove(&self, name_or_id: &str, in_use: &dyn Fn(&str) -> bool) -> anyhow::Result<()> {
        let (id, names) = if is_id_like(name_or_id) {
            let id = self.full_id(name_or_id)?;
            let names = self.names_of(&id)?;
            (id, names)
        } else {
            let id = self.name_target(name_or_id)?.ok_or_else(|| {
                anyhow!("no image named {name_or_id:?} in {}", self.root.display())
            })?;
            (id, vec![name_or_id.to_owned()])
        };
        if in_use(&id) {
            bail!("image {name_or_id} ({id}) is in use by a sandbox or a snapshot");
        }
        self.refuse_newer(&id)?;
        for name in &names {
            let path = self.name_path(name)?;
            fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
        }
        if self.names_of(&id)?.is_empty() {
            self.delete_content(&id)?;
        }
        Ok(())
    }

    /// Removes every image no name points at and `in_use` does not claim;
    /// returns their ids.
    pub fn prune(&self, in_use: &dyn Fn(&str) -> bool) -> anyhow::Result<Vec<String>> {
        let named: std::collections::BTreeSet<String> =
            self.names()?.into_iter().map(|(_, id)| id).collect();
        let mut removed = Vec::new();
        for id in self.ids()? {
            if !named.contains(&id) && !in_use(&id) {
                self.refuse_newer(&id)?;
                self.delete_content(&id)?;
                removed.push(id);
            }
        }
        Ok(removed)
    }

    // --- Used by build and import -------------------------------------------

    /// A fresh work directory under `tmp/`, removed when dropped unless
    /// [`ImageStore::install`] moved it into the store.
    pub(crate) fn temp_dir(&self) -> anyhow::Result<TempDir> {
        let name = format!("{}-{:016x}", std::process::id(), rand::random::<u64>());
        let path = self.root.join(TMP_DIR).join(name);
        fs::create_dir(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(TempDir { path: Some(path) })
    }

    /// Whether the content `id` is in the store already.
    pub(crate) fn has(&self, id: &str) -> bool {
        validate_id(id).is_ok() && self.content_dir(id).join(META_FILE).exists()
    }

    /// Moves a finished tree (`<work>/rootfs`) into the store as `image.id`
    /// (kept as it is if that content exists already) and points `name` at
    /// it. Returns the image as stored.
    pub(crate) fn install(&self, work: TempDir, image: Image) -> anyhow::Result<Image> {
        validate_id(&image.id)?;
        validate_name(&image.name)?;
        let name = image.name.clone();
        if !self.has(&image.id) {
            let dir = work.path();
            let meta = format::LOCAL_IMAGE.to_vec_pretty(&image)?;
            write_file(&dir.join(META_FILE), &meta)?;
            fs::set_permissions(dir, fs::Permissions::from_mode(0o755))?;
            let target = self.content_dir(&image.id);
            match fs::rename(dir, &target) {
                Ok(()) => work.keep(),
                // Another process installed the same content meanwhile.
                Err(_) if self.has(&image.id) => {}
                Err(err) => {
                    return Err(err).with_context(|| {
                        format!("moving {} to {}", dir.display(), target.display())
                    });
                }
            }
        }
        self.set_name(&name, &image.id)?;
        self.resolve(&name)
    }

    // --- Internals ------------------------------------------------------------

    fn content_dir(&self, id: &str) -> PathBuf {
        self.root.join(STORE_DIR).join(id)
    }

    fn name_path(&self, name: &str) -> anyhow::Result<PathBuf> {
        validate_name(name)?;
        Ok(self.root.join(NAMES_DIR).join(name))
    }

    fn load(&self, id: &str) -> anyhow::Result<Image> {
        validate_id(id)?;
        let dir = self.content_dir(id);
        let path = dir.join(META_FILE);
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                bail!("no image {id} in {}", self.root.display())
            }
            Err(err) => return Err(err).with_context(|| format!("reading {}", path.display())),
        };
        format::LOCAL_IMAGE.check(&path, &bytes)?;
        let mut image: Image = serde_json::from_slice(&bytes)
            .with_context(|| format!("parsing {}", path.display()))?;
        if image.id != id {
            bail!("{} describes {}, not {id}", path.display(), image.id);
        }
        // Where the tree is now, whatever path it was built under.
        image.rootfs = dir.join(ROOTFS_DIR);
        Ok(image)
    }

    fn name_target(&self, name: &str) -> anyhow::Result<Option<String>> {
        let path = self.name_path(name)?;
        match fs::read_to_string(&path) {
            Ok(text) => {
                let id = text.trim().to_owned();
                validate_id(&id).with_context(|| format!("reading {}", path.display()))?;
                Ok(Some(id))
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(err).with_context(|| format!("reading {}", path.display())),
        }
    }

    /// Points `name` at `id`: written aside, then renamed over the old
    /// pointer, so readers see the old id or the new one, never neither.
    fn set_name(&self, name: &str, id: &str) -> anyhow::Result<()> {
        let path = self.name_path(name)?;
        let tmp = self.root.join(NAMES_DIR).join(format!(
            ".{name}.{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        write_file(&tmp, format!("{id}\n").as_bytes())?;
        fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))
    }

    /// `(name, id)` of every name, sorted by name.
    fn names(&self) -> anyhow::Result<Vec<(String, String)>> {
        let mut names = Vec::new();
        for name in list_dir(&self.root.join(NAMES_DIR))? {
            // Skips the pointers being written (`.name.tmp`) and strays.
            if validate_name(&name).is_err() {
                continue;
            }
            if let Some(id) = self.name_target(&name)? {
                names.push((name, id));
            }
        }
        Ok(names)
    }

    fn names_of(&self, id: &str) -> anyhow::Result<Vec<String>> {
        Ok(self
            .names()?
            .into_iter()
            .filter(|(_, target)| target == id)
            .map(|(name, _)| name)
            .collect())
    }

    /// Every id in the store, sorted.
    fn ids(&self) -> anyhow::Result<Vec<String>> {
        Ok(list_dir(&self.root.join(STORE_DIR))?
            .into_iter()
            .filter(|id| validate_id(id).is_ok())
            .collect())
    }

    /// The full id for an id or a unique id prefix.
    fn full_id(&self, text: &str) -> anyhow::Result<String> {
        if validate_id(text).is_ok() {
            if !self.has(text) {
                bail!("no image {text} in {}", self.root.display());
            }
            return Ok(text.to_owned());
        }
        let matches: Vec<String> = self
            .ids()?
            .into_iter()
            .filter(|id| id.starts_with(text))
            .collect();
        match matches.as_slice() {
            [id] => Ok(id.clone()),
            [] => bail!("no image {text} in {}", self.root.display()),
            _ => bail!("{text} matches several images; give more of the id"),
        }
    }

    /// Removes `store/<id>`: renamed out of `store/` first, so the image
    /// disappears at once and a crash mid-delete leaves only `tmp/` litter.
    /// Refuses content whose record a newer Garrison wrote: it is left to
    /// that release, never removed because this one cannot read it.
    fn refuse_newer(&self, id: &str) -> anyhow::Result<()> {
        validate_id(id)?;
        let path = self.content_dir(id).join(META_FILE);
        if let Ok(bytes) = fs::read(&path) {
            format::LOCAL_IMAGE.check(&path, &bytes)?;
        }
        Ok(())
    }

    fn delete_content(&self, id: &str) -> anyhow::Result<()> {
        validate_id(id)?;
        let dir = self.content_dir(id);
        let doomed = self.root.join(TMP_DIR).join(format!(
            "{}-{:016x}-deleting",
            std::process::id(),
            rand::random::<u64>()
        ));
        match fs::rename(&dir, &doomed) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(err) => return Err(err).with_context(|| format!("removing {}", dir.display())),
        }
        fs::remove_dir_all(&doomed).with_context(|| format!("removing {}", doomed.display()))
    }

    /// Removes `tmp/<pid>-...` entries whose process is gone.
    fn clean_tmp(&self) {
        let tmp = self.root.join(TMP_DIR);
        let Ok(entries) = list_dir(&tmp) else { return };
        for entry in entries {
            let Some(pid) = entry.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
                continue;
            };
            if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
                let path = tmp.join(&entry);
                if let Err(err) = fs::remove_dir_all(&path) {
                    tracing::warn!("removing leftover {}: {err}", path.display());
                }
            }
        }
    }
}

/// A work directory under the store's `tmp/`, removed on drop unless kept.
pub(crate) struct TempDir {
    path: Option<PathBuf>,
}

impl TempDir {
    pub(crate) fn path(&self) -> &Path {
        self.path.as_deref().expect("TempDir used after keep")
    }

    /// The root filesystem being made in this directory.
    pub(crate) fn rootfs(&self) -> PathBuf {
        self.path().join(ROOTFS_DIR)
    }

    fn keep(mut self) {
        self.path = None;
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if let Some(path) = self.path.take()
            && let Err(err) = fs::remove_dir_all(&path)
            && err.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!("removing {}: {err}", path.display());
        }
    }
}

fn list_dir(dir: &Path) -> anyhow::Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let entry = entry.with_context(|| format!("listing {}", dir.display()))?;
        if let Some(name) = entry.file_name().to_str() {
            names.push(name.to_owned());
        }
    }
    names.sort();
    Ok(names)
}

/// Writes and fsyncs a small file, so a rename after it never exposes an
/// empty file after a power cut.
fn write_file(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let mut file =
        fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
