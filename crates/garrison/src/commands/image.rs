//! `garrison image`: build, import, list and remove the `local` backend's
//! images (see `local::images`); build the same recipe on Modal,
//! and build, list and remove images in Tensorlake's catalog.

mod modal_build;
mod tensorlake_catalog;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use local::images::{Image, ImageStore, ImageUsers, NoProgress, Progress, Recipe, names};

#[derive(Args)]
pub struct ImageArgs {
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
    /// Build a session image from a TOML recipe.
    ///
    /// Without --recipe, builds the default recipe: Debian bookworm with
    /// git, ca-certificates, curl, procps and the usual tools. A recipe:
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
        /// The recipe file.
        #[arg(long, value_name = "FILE")]
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
}

pub async fn run(args: ImageArgs) -> anyhow::Result<()> {
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
            "modal" => return modal_build::build(name, recipe.as_deref(), &state_dir).await,
            "tensorlake" => {
                return tensorlake_catalog::build(
                    name,
                    recipe.as_deref(),
                    base.as_deref(),
                    &state_dir,
                )
                .await;
            }
            _ if base.is_some() => bail!("--base is for --backend tensorlake"),
            _ => {}
        },
        ImageCommand::Ls { backend, json } if backend == "tensorlake" => {
            return tensorlake_catalog::list(*json).await;
        }
        ImageCommand::Rm { name, backend } if backend == "tensorlake" => {
            return tensorlake_catalog::remove(name).await;
        }
        _ => {}
    }
    let store = ImageStore::open(&state_dir.join("images"))
        .with_context(|| format!("opening the images of {}", state_dir.display()))?;
    match args.command {
        ImageCommand::Build { name, recipe, .. } => {
            let recipe = match recipe {
                Some(path) => Recipe::load(&path)?,
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
            let users = ImageUsers::scan(&state_dir, &snapshot_dir);
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
        ImageCommand::Prune => {
            let users = ImageUsers::scan(&state_dir, &snapshot_dir);
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

/// `image ls`: NAME, ID (short), SIZE, CREATED, CHROME.
fn table(images: &[Image]) -> String {
    let mut rows = vec![[
        "NAME".to_owned(),
        "ID".to_owned(),
        "SIZE".to_owned(),
        "CREATED".to_owned(),
        "CHROME".to_owned(),
    ]];
    for image in images {
        let created = chrono::DateTime::from_timestamp_millis(image.created_at_ms)
            .map(|t| t.format("%Y-%m-%d %H:%M UTC").to_string())
            .unwrap_or_default();
        rows.push([
            if image.name.is_empty() {
                "<none>".to_owned()
            } else {
                image.name.clone()
            },
            names::short_id(&image.id).to_owned(),
            human_size(image.size_bytes),
            created,
            image.chrome_path.clone().unwrap_or_else(|| "-".to_owned()),
        ]);
    }
    let widths: Vec<usize> = (0..5)
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

fn human_size(bytes: u64) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    let mib = bytes as f64 / MIB;
    if mib >= 1024.0 {
        format!("{:.1} GiB", mib / 1024.0)
    } else {
        format!("{mib:.0} MiB")
    }
}

/// A progress bar on a terminal, plain lines otherwise (logs, CI).
trait Reporter: Progress {
    fn as_progress(&self) -> &dyn Progress;
    fn finish(&self);
}

fn progress() -> Box<dyn Reporter> {
    if crate::verbosity::quiet() {
        Box::new(NoProgress)
    } else if std::io::stderr().is_terminal() {
        Box::new(Bar::new())
    } else {
        Box::new(Lines::default())
    }
}

/// An indicatif bar (indicatif: the maintained terminal progress crate):
/// a spinner with the latest tool output, or bytes against a total.
struct Bar {
    bar: ProgressBar,
    /// Whether the style shows bytes against a total right now.
    counting: Mutex<bool>,
}

impl Bar {
    fn new() -> Self {
        let bar = ProgressBar::new_spinner();
        bar.enable_steady_tick(Duration::from_millis(120));
        let this = Self {
            bar,
            counting: Mutex::new(true),
        };
        this.spinner();
        this
    }

    fn spinner(&self) {
        let mut counting = self.counting.lock().unwrap();
        if *counting {
            self.bar.set_style(
                ProgressStyle::with_template("{spinner} {prefix:>10} {elapsed:>4} {wide_msg}")
                    .expect("valid template"),
            );
            *counting = false;
        }
    }
}

impl Progress for Bar {
    fn stage(&self, what: &str) {
        self.spinner();
        self.bar.set_prefix(what.to_owned());
        self.bar.set_message("");
        self.bar.set_position(0);
    }

    fn bytes(&self, done: u64, total: Option<u64>) {
        match total {
            Some(total) => {
                let mut counting = self.counting.lock().unwrap();
                if !*counting {
                    self.bar.set_style(
                        ProgressStyle::with_template(
                            "{prefix:>12} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {eta}",
                        )
                        .expect("valid template")
                        .progress_chars("=> "),
                    );
                    *counting = true;
                }
                self.bar.set_length(total);
                self.bar.set_position(done);
            }
            None => self.bar.set_message(human_size(done)),
        }
    }

    fn detail(&self, line: &str) {
        self.bar.set_message(line.to_owned());
    }
}

impl Reporter for Bar {
    fn as_progress(&self) -> &dyn Progress {
        self
    }
    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// `-q`: none.
impl Reporter for NoProgress {
    fn as_progress(&self) -> &dyn Progress {
        self
    }
    fn finish(&self) {}
}

/// One line per stage, and a bytes line at most every 5 seconds.
#[derive(Default)]
struct Lines {
    last_bytes: Mutex<Option<Instant>>,
}

impl Progress for Lines {
    fn stage(&self, what: &str) {
        eprintln!("garrison image: {what}");
        *self.last_bytes.lock().unwrap() = Some(Instant::now());
    }

    fn bytes(&self, done: u64, total: Option<u64>) {
        let mut last = self.last_bytes.lock().unwrap();
        if last.is_some_and(|t| t.elapsed() < Duration::from_secs(5)) {
            return;
        }
        *last = Some(Instant::now());
        match total {
            Some(total) => eprintln!(
                "garrison image:   {} of {}",
                human_size(done),
                human_size(total)
            ),
            None => eprintln!("garrison image:   {}", human_size(done)),
        }
    }
}

impl Reporter for Lines {
    fn as_progress(&self) -> &dyn Progress {
        self
    }
    fn finish(&self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_lines_up() {
        let image = |name: &str, chrome: Option<&str>| Image {
            id: format!("sha256-{}", "ab".repeat(32)),
            name: name.to_owned(),
            rootfs: PathBuf::from("/x"),
            created_at_ms: 0,
            size_bytes: 240 * 1024 * 1024,
            chrome_path: chrome.map(str::to_owned),
            xvfb_path: None,
            source: "recipe:x".to_owned(),
        };
        let out = table(&[image("default", None), image("", Some("/usr/bin/chromium"))]);
        assert_eq!(
            out,
            "NAME     ID                   SIZE     CREATED               CHROME\n\
             default  sha256-abababababab  240 MiB  1970-01-01 00:00 UTC  -\n\
             <none>   sha256-abababababab  240 MiB  1970-01-01 00:00 UTC  /usr/bin/chromium\n"
        );
    }
}
