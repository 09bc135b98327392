//! `garrison image`: build, import, list and remove the `local` backend's
//! images (see `::local::images`); build the same recipe on another
//! backend, and list and remove images in its catalog, through its
//! plug-in (Modal builds; Tensorlake builds, lists and removes).

mod progress;
mod recipes;
mod remote;
mod table;

use std::path::PathBuf;
use std::time::Instant;

use ::local::images::{Image, ImageStore, ImageUsers, Recipe, names};
use anyhow::{Context, bail};
use clap::{Args, Subcommand};

use progress::progress;
use table::{human_size, table};

#[derive(Args)]
pub(crate) struct ImageArgs {
    /// Garrison's state directory; images live in `<state-dir>/images`.
    /// Default: /var/lib/garrison as root, else ~/.local/share/garrison.
    #[arg(long, env = "GARRISON_HOME", global = true, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Where snapshots are kept (`rm` refuses an image a snapshot sits on).
    /// Default: `<state-dir>/snapshots`.
    #[arg(long, env = "GARRISON_SNAPSHOT_DIR", global = true, value_name = "DIR")]
    snapshot_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: ImageCommand,
}

#[derive(Subcommand)]
enum ImageCommand {
    /// Build a session image from a TOML recipe or a built-in one.
    ///
    /// Without --recipe, builds the built-in `default` recipe: Debian
    /// bookworm with git, ca-certificates, curl, procps and the usual tools.
    /// `--recipe desktop` builds the image a desktop session
    /// (SANDBOX_DESKTOP) needs: Xvfb, a window manager, Chromium, fonts
    /// (`garrison image recipes` lists the built-in recipes):
    ///
    ///   garrison image build default --recipe desktop
    ///
    /// A recipe file:
    ///
    ///   suite = "bookworm"
    ///   packages = ["python3", "build-essential"]
    ///   steps = ["pip install --break-system-packages uv"]
    ///   chromium = true     # sets DEVIN_CHROME_PATH in sessions
    ///   ffmpeg = false
    ///
    /// Where it is built (--backend):
    ///
    ///   local       mmdebstrap on this machine (needs root); sessions of
    ///               `serve --backend local` use the image named `default`
    ///   modal       Modal's image builder; the image id is cached by name
    ///               and recipe for `serve --backend modal`
    ///   tensorlake  a builder sandbox runs the packages and each step in
    ///               order (as root, `/bin/sh -e`, output shown as it comes),
    ///               its filesystem is snapshotted and registered in
    ///               Tensorlake's image catalog under NAME (lowercase, e.g.
    ///               `garrison-session`), replacing what NAME held; the
    ///               builder sandbox is deleted whatever happens (Ctrl-C
    ///               included). A failing step stops the build, naming the
    ///               step and its last output. Sessions use it with
    ///               TENSORLAKE_IMAGE=NAME garrison serve --backend tensorlake
    ///               Needs TENSORLAKE_API_KEY; the builder starts from
    ///               --base (default: Tensorlake's default image, which must
    ///               have apt-get); `suite` only names the suite of `mirror`.
    ///               TENSORLAKE_BUILD_PATH replaces the steps' PATH.
    #[command(verbatim_doc_comment)]
    Build {
        /// The name to give the image (`default` is what local sessions
        /// use).
        name: String,
        /// The recipe: a TOML file, or the name of a built-in recipe
        /// (`default`, `desktop`; see `image recipes`). A file of that
        /// path wins when one exists.
        #[arg(long, value_name = "FILE|NAME")]
        recipe: Option<PathBuf>,
        /// Where to build: `local`, `modal` or `tensorlake` (see above).
        #[arg(long, value_name = "BACKEND", default_value = "local", value_parser = ["local", "modal", "tensorlake"])]
        backend: String,
        /// `--backend tensorlake` only: the image the builder sandbox
        /// starts from (a catalog name or a Tensorlake image).
        #[arg(long, value_name = "IMAGE")]
        base: Option<String>,
    },
    /// Import an OCI image layout (directory or tar) or a `docker save`
    /// tarball (plain, gzip or zstd).
    Import {
        name: String,
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
    /// List images (this machine's, or Tensorlake's catalog).
    ///
    /// Locally: named images, then unnamed ones kept for sessions and
    /// snapshots made on them. With `--backend tensorlake`: every image in
    /// Tensorlake's catalog, those Garrison built and any other (such as
    /// the SDK's `tl sbx image create`), with its `image_` id.
    Ls {
        /// Whose images: `local` (this machine's) or `tensorlake`.
        #[arg(long, value_name = "BACKEND", default_value = "local", value_parser = ["local", "tensorlake"])]
        backend: String,
        /// Print the images as a JSON array
        ///
        /// Locally, each image has: name (null for an unnamed one), id,
        /// size_bytes, created_at_ms (Unix milliseconds), chrome_path and
        /// xvfb_path (null when the image has none), source
        /// (`recipe:<hash>` or `import:<file>`) and rootfs. With
        /// `--backend tensorlake`: the catalog's own fields (id, name,
        /// snapshot_id, global, physical_size_bytes, logical_size_bytes,
        /// created_at, updated_at, ...).
        #[arg(long)]
        json: bool,
    },
    /// Remove an image (this machine's, or from Tensorlake's catalog).
    ///
    /// Locally: a name (or an id), refused while a sandbox or a snapshot of
    /// the local backend uses the image. With `--backend tensorlake`: the
    /// catalog image NAME (sandboxes already running from it keep running;
    /// new sessions with TENSORLAKE_IMAGE=NAME fail to start).
    Rm {
        #[arg(value_name = "NAME_OR_ID")]
        name: String,
        /// Whose image: `local` (this machine's) or `tensorlake`.
        #[arg(long, value_name = "BACKEND", default_value = "local", value_parser = ["local", "tensorlake"])]
        backend: String,
    },
    /// Remove the unnamed images no sandbox or snapshot uses.
    Prune,
    /// List the built-in recipes `image build --recipe NAME` takes.
    ///
    /// Each with a one-line description. The same names work for every
    /// backend (`--backend local|modal|tensorlake` of `image build`).
    Recipes {
        /// Print the recipes as a JSON array: each has name,
        /// description and recipe (the recipe's fields, as in a file).
        #[arg(long)]
        json: bool,
    },
}

/// `--backend`'s value for this machine's images (the others are the
/// plug-ins' [`sandbox::plugin::images::ImageService`]s).
const LOCAL: &str = "local";

pub(crate) async fn run(args: ImageArgs) -> anyhow::Result<()> {
    let state_dir = match &args.state_dir {
        Some(dir) => dir.clone(),
        None => orchestrator::settings::HostEnv::current()
            .default_state_dir()
            .map_err(|err| anyhow::anyhow!("{err}"))?,
    };
    let snapshot_dir = args
        .snapshot_dir
        .clone()
        .unwrap_or_else(|| state_dir.join("snapshots"));
    match &args.command {
        ImageCommand::Build {
            name,
            recipe,
            backend,
            base,
        } => match backend.as_str() {
            LOCAL if base.is_some() => bail!("--base is for --backend tensorlake"),
            LOCAL => {}
            other => {
                return remote::build(other, name, recipe.as_deref(), base.as_deref(), &state_dir)
                    .await;
            }
        },
        ImageCommand::Ls { backend, json } if backend != LOCAL => {
            return remote::list(backend, *json).await;
        }
        ImageCommand::Rm { name, backend } if backend != LOCAL => {
            return remote::remove(backend, name).await;
        }
        // Needs no store: listing them must work before any image exists.
        ImageCommand::Recipes { json } => return recipes::print(*json),
        _ => {}
    }
    let store = ImageStore::open(&state_dir.join("images"))
        .with_context(|| format!("opening the images of {}", state_dir.display()))?;
    match args.command {
        ImageCommand::Build { name, recipe, .. } => {
            let recipe = match recipe {
                Some(arg) => Recipe::file_or_builtin(&arg)?,
                None => Recipe::default_recipe(),
            };
            build_with_progress(&store, &name, &recipe).await?;
        }
        ImageCommand::Import { name, file } => {
            let started = Instant::now();
            let progress = progress();
            let image = store.import(&name, &file, progress.as_progress()).await;
            progress.finish();
            report("imported", &image?, started);
        }
        ImageCommand::Ls { json: true, .. } => {
            let images = store.list()?;
            let views: Vec<ImageView> = images.iter().map(ImageView::from).collect();
            crate::output::json(&views)?;
        }
        ImageCommand::Ls { .. } => crate::output::print(&table(&store.list()?))?,
        ImageCommand::Rm { name, .. } => {
            let users = ImageUsers::scan(&state_dir, &snapshot_dir)?;
            let image = store.resolve(&name)?;
            let who = users.users(&image.id);
            if !who.is_empty() {
                bail!(
                    "image {name} ({}) is in use by {}; it can be removed once they are gone",
                    names::short_id(&image.id),
                    who.join(", ")
                );
            }
            store.remove(&name, &|id| users.in_use(id))?;
            println!("removed {name}");
        }
        ImageCommand::Recipes { .. } => unreachable!("answered above"),
        ImageCommand::Prune => {
            let users = ImageUsers::scan(&state_dir, &snapshot_dir)?;
            for id in store.prune(&|id| users.in_use(id))? {
                println!("removed {id}");
            }
        }
    }
    Ok(())
}

/// Builds `name` from `recipe` into `store` with `garrison image build`'s
/// progress display and closing line (`garrison demo` builds its image
/// this way too).
pub(crate) async fn build_with_progress(
    store: &ImageStore,
    name: &str,
    recipe: &Recipe,
) -> anyhow::Result<Image> {
    let started = Instant::now();
    let progress = progress();
    let image = store.build(name, recipe, progress.as_progress()).await;
    progress.finish();
    let image = image?;
    report("built", &image, started);
    Ok(image)
}

fn report(what: &str, image: &Image, started: Instant) {
    println!(
        "{what} {} ({}, {}) in {:.0?}: {}",
        image.name,
        names::short_id(&image.id),
        human_size(image.size_bytes),
        started.elapsed(),
        image.rootfs.display()
    );
}

/// One image of `image ls --json`: its own names for the fields, so that
/// the store's internals can change under them.
#[derive(serde::Serialize)]
struct ImageView<'a> {
    name: Option<&'a str>,
    id: &'a str,
    size_bytes: u64,
    created_at_ms: i64,
    chrome_path: Option<&'a str>,
    xvfb_path: Option<&'a str>,
    source: &'a str,
    rootfs: &'a std::path::Path,
}

impl<'a> From<&'a Image> for ImageView<'a> {
    fn from(image: &'a Image) -> Self {
        Self {
            name: Some(image.name.as_str()).filter(|n| !n.is_empty()),
            id: &image.id,
            size_bytes: image.size_bytes,
            created_at_ms: image.created_at_ms,
            chrome_path: image.chrome_path.as_deref(),
            xvfb_path: image.xvfb_path.as_deref(),
            source: &image.source,
            rootfs: &image.rootfs,
        }
    }
}
