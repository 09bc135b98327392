//! What an image says about itself inside its own tree, for the sessions
//! that run on it.

use std::fs;
use std::path::Path;

use anyhow::Context;

use super::layer;
use super::{IMAGE_INFO_PATH, Image};

/// Writes `/etc/garrison-image.json`, so a session can tell what it runs
/// on. (Not the id: the id of a build covers this file.)
pub(super) fn write_image_info(rootfs: &Path, image: &Image) -> anyhow::Result<()> {
    let etc = layer::resolve(rootfs, Path::new("etc"))?;
    let info = serde_json::json!({
        "name": image.name,
        "source": image.source,
        "created_at_ms": image.created_at_ms,
        "chrome_path": image.chrome_path,
        "xvfb_path": image.xvfb_path,
    });
    let path = etc.join(Path::new(IMAGE_INFO_PATH).file_name().expect("has a name"));
    let _ = fs::remove_file(&path);
    fs::write(&path, serde_json::to_vec_pretty(&info)?)
        .with_context(|| format!("writing {}", path.display()))
}
