//! Session images built on Tensorlake, the way the official SDK builds a
//! sandbox image (materialised in a builder sandbox, snapshotted,
//! registered under a name; `tensorlake/image/sandbox_builder.py` and the
//! crate's `sandbox_images.rs`), from Garrison's own TOML recipe:
//!
//! 1. [`plan`] turns the recipe into shell steps ([`Recipe::shell_steps`],
//!    shared with the Modal builder): pure, checked before anything is
//!    created;
//! 2. a builder sandbox is created from the base image (Tensorlake's
//!    default unless one is given) with open egress, and each step runs in
//!    it as root with `/bin/sh -ec`, its output passed on line by line; a
//!    failing step ends the build with an error naming the step and the
//!    tail of its output;
//! 3. Garrison's own traces (its output log and labels file) are removed,
//!    the filesystem is snapshotted and the snapshot waited for;
//! 4. the snapshot is registered in the catalog ([`ImageCatalog`]) under
//!    the name, replacing what the name held;
//! 5. the builder sandbox is deleted whatever happened once it exists.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use sandbox::Recipe;
use sandbox::{
    Handle, NetworkSpec, ProcessRef, ProcessSpec, ProcessStatus, Resources, Sandbox, SandboxName,
    SandboxSpec,
};

use crate::backend::{TensorlakeBackend, process_status};
use crate::catalog::{CatalogImage, ImageCatalog, check_image_name};
use crate::dataplane::ProcessKey;
use crate::models::StartProcess;

/// `PATH` of the build steps unless the caller gives another.
pub const DEFAULT_STEP_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// The label that marks a builder sandbox (its value: the image name), so
/// no one takes it for a session's.
pub(crate) const LABEL_IMAGE_BUILD: &str = "garrison.image-build";
/// Output lines kept for the error of a failing step.
const TAIL_LINES: usize = 30;
/// Bytes kept of one output line in that tail.
const TAIL_LINE_BYTES: usize = 400;
/// Bytes read per output request.
const READ_CHUNK: usize = 64 * 1024;
/// Bounds one step, only so a wedged step cannot hang the build forever.
const STEP_GUARD: Duration = Duration::from_secs(4 * 3600);

/// One step as the builder runs it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PlannedStep {
    /// `packages`, `steps[2]`...: what errors and progress call it.
    pub label: String,
    /// The command line.
    pub argv: Vec<String>,
    /// Its environment.
    pub env: BTreeMap<String, String>,
}

/// What to build.
#[derive(Clone, Debug)]
pub struct BuildRequest {
    /// The catalog name (see `catalog::valid_image_name`).
    pub name: String,
    /// What goes into the image.
    pub recipe: Recipe,
    /// The image the builder sandbox starts from; `None` is Tensorlake's
    /// default image.
    pub base_image: Option<String>,
    /// `PATH` of the steps ([`DEFAULT_STEP_PATH`] normally).
    pub step_path: String,
    /// The builder sandbox's size.
    pub resources: Resources,
}

/// The steps of `recipe`, ready to run: pure, so a bad recipe or name is
/// refused before any sandbox exists.
pub(crate) fn plan(
    name: &str,
    recipe: &Recipe,
    step_path: &str,
) -> anyhow::Result<Vec<PlannedStep>> {
    check_image_name(name)?;
    if step_path.is_empty() || step_path.chars().any(char::is_control) {
        bail!("the PATH for build steps is empty or has control characters");
    }
    let env = BTreeMap::from([
        ("PATH".to_owned(), step_path.to_owned()),
        ("HOME".to_owned(), "/root".to_owned()),
        ("LANG".to_owned(), "C.UTF-8".to_owned()),
        ("DEBIAN_FRONTEND".to_owned(), "noninteractive".to_owned()),
    ]);
    Ok(recipe
        .shell_steps()?
        .into_iter()
        .map(|step| PlannedStep {
            label: step.label,
            argv: vec!["/bin/sh".to_owned(), "-ec".to_owned(), step.script],
            env: env.clone(),
        })
        .collect())
}

/// The last lines of a step's output, each cut to a bounded length.
#[derive(Debug, Default)]
pub(crate) struct Tail {
    lines: VecDeque<String>,
}

impl Tail {
    /// Keeps `line` (cut if long), dropping the oldest when full.
    pub(crate) fn push(&mut self, line: &str) {
        if self.lines.len() == TAIL_LINES {
            self.lines.pop_front();
        }
        let mut cut = line.len().min(TAIL_LINE_BYTES);
        while !line.is_char_boundary(cut) {
            cut -= 1;
        }
        self.lines.push_back(line[..cut].to_owned());
    }

    /// The lines kept, oldest first.
    pub(crate) fn lines(&self) -> impl Iterator<Item = &str> {
        self.lines.iter().map(String::as_str)
    }
}

/// Splits output bytes that arrive in arbitrary chunks into lines.
#[derive(Debug, Default)]
pub(crate) struct Lines {
    partial: Vec<u8>,
}

impl Lines {
    /// The complete lines `chunk` finishes.
    pub(crate) fn feed(&mut self, chunk: &[u8]) -> Vec<String> {
        self.partial.extend_from_slice(chunk);
        let mut out = Vec::new();
        while let Some(end) = self.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            out.push(
                String::from_utf8_lossy(&line[..end])
                    .trim_end_matches('\r')
                    .to_owned(),
            );
        }
        out
    }

    /// The last line when the output did not end with a newline.
    pub(crate) fn finish(&mut self) -> Option<String> {
        (!self.partial.is_empty())
            .then(|| String::from_utf8_lossy(&std::mem::take(&mut self.partial)).into_owned())
    }
}

/// The error of a step that did not succeed.
pub(crate) fn step_failure(step: &PlannedStep, status: ProcessStatus, tail: &Tail) -> String {
    let how = match status {
        ProcessStatus::Exited(code) if code > 128 => format!("was killed by signal {}", code - 128),
        ProcessStatus::Exited(code) => format!("exited with status {code}"),
        ProcessStatus::Lost => "was lost (the builder sandbox ended?)".to_owned(),
        ProcessStatus::Running => "did not finish".to_owned(),
    };
    let mut message = format!("build step {} {how}", step.label);
    let lines: Vec<&str> = tail.lines().collect();
    if lines.is_empty() {
        message.push_str(" (no output)");
    } else {
        message.push_str("; its last output:");
        for line in lines {
            message.push_str("\n  | ");
            message.push_str(line);
        }
    }
    message
}

/// Builds `request` on Tensorlake and registers it in `catalog`; progress
/// lines go to `progress`. The builder sandbox is deleted whatever happens,
/// including when `cancel` completes first (an interrupt): the build then
/// stops where it is, with an error. A `cancel` that completes while the
/// builder is being created takes effect as soon as it exists.
pub async fn build_image(
    backend: &TensorlakeBackend,
    catalog: &ImageCatalog,
    request: &BuildRequest,
    progress: &mut (dyn FnMut(&str) + Send),
    cancel: impl std::future::Future<Output = ()> + Send,
) -> anyhow::Result<CatalogImage> {
    let steps = plan(&request.name, &request.recipe, &request.step_path)?;
    let builder = SandboxName::for_session(&format!(
        "image-build/{}/{:016x}",
        request.name,
        rand::random::<u64>()
    ));
    progress(&format!(
        "creating the builder sandbox {builder} from {}",
        request
            .base_image
            .as_deref()
            .unwrap_or("Tensorlake's default image")
    ));
    let handle = backend
        .create(&SandboxSpec {
            name: builder,
            labels: BTreeMap::from([(LABEL_IMAGE_BUILD.to_owned(), request.name.clone())]),
            image: request.base_image.clone(),
            restore_from: None,
            resources: request.resources,
            // The steps fetch packages: open egress.
            network: NetworkSpec::default(),
        })
        .await
        .context("creating the builder sandbox")?;
    let built = tokio::select! {
        built = materialise(backend, catalog, request, &steps, &handle, progress) => built,
        () = cancel => Err(anyhow!("interrupted")),
    };
    progress(&format!("deleting the builder sandbox {}", handle.name));
    if let Err(e) = backend.destroy(&handle).await {
        // The build's own outcome matters more; the leftover is named.
        progress(&format!(
            "warning: deleting the builder sandbox {} ({}) failed: {e}",
            handle.name, handle.id
        ));
    }
    built
}

async fn materialise(
    backend: &TensorlakeBackend,
    catalog: &ImageCatalog,
    request: &BuildRequest,
    steps: &[PlannedStep],
    handle: &Handle,
    progress: &mut (dyn FnMut(&str) + Send),
) -> anyhow::Result<CatalogImage> {
    for (i, step) in steps.iter().enumerate() {
        progress(&format!("step {}/{}: {}", i + 1, steps.len(), step.label));
        run_step(backend, handle, i, step, progress).await?;
    }
    remove_traces(backend, handle).await?;
    progress("snapshotting the builder sandbox's filesystem");
    let snapshot = backend
        .snapshot(handle)
        .await
        .context("snapshotting the builder sandbox")?;
    progress(&format!(
        "registering snapshot {} as the image {}",
        snapshot.id, request.name
    ));
    catalog
        .register(&request.name, &snapshot.id)
        .await
        .with_context(|| format!("registering the image {}", request.name))
}

/// Removes what Garrison itself left in the builder's filesystem: its
/// output log and labels file at the root of its directories (the parent
/// of the workspace), so sessions started from the image begin clean. Run
/// straight through the data plane: a process started through the backend
/// would write its output to that very log.
async fn remove_traces(backend: &TensorlakeBackend, handle: &Handle) -> anyhow::Result<()> {
    let root = std::path::Path::new(&handle.workdir)
        .parent()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| handle.workdir.clone());
    let dp = backend
        .sandbox_if_running(handle)
        .await?
        .ok_or_else(|| anyhow!("the builder sandbox stopped running"))?;
    let started = dp
        .start_process(&StartProcess {
            command: "rm".to_owned(),
            args: vec![
                "-f".to_owned(),
                "--".to_owned(),
                format!("{root}/{}", crate::backend::OUTPUT_LOG),
                format!("{root}/garrison-labels.json"),
            ],
            env: BTreeMap::from([("PATH".to_owned(), DEFAULT_STEP_PATH.to_owned())]),
            working_dir: None,
            name: None,
            restart: None,
        })
        .await?;
    let key = ProcessKey::Pid(started.pid);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
    loop {
        match process_status(&dp.get_process(&key).await?) {
            ProcessStatus::Running if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            ProcessStatus::Exited(0) => return Ok(()),
            other => bail!("removing Garrison's files from the builder sandbox: {other:?}"),
        }
    }
}

async fn run_step(
    backend: &TensorlakeBackend,
    handle: &Handle,
    index: usize,
    step: &PlannedStep,
    progress: &mut (dyn FnMut(&str) + Send),
) -> anyhow::Result<()> {
    let process = backend
        .spawn(
            handle,
            &ProcessSpec {
                name: format!("image-step-{index}"),
                argv: step.argv.clone(),
                env: step.env.clone(),
                cwd: handle.workdir.clone(),
            },
        )
        .await
        .with_context(|| format!("starting build step {}", step.label))?;
    let mut output = Output::default();
    let deadline = tokio::time::Instant::now() + STEP_GUARD;
    let mut pause = Duration::from_millis(50);
    let status = loop {
        let status = backend.status(handle, &process).await?;
        // Read after the status: output written before the exit is all in.
        output.drain(backend, handle, &process, progress).await?;
        match status {
            ProcessStatus::Running if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            done => break done,
        }
    };
    if let Some(line) = output.lines.finish() {
        progress(&format!("  | {line}"));
        output.tail.push(&line);
    }
    match status {
        ProcessStatus::Exited(0) => Ok(()),
        other => Err(anyhow!(step_failure(step, other, &output.tail))),
    }
}

/// A step's output read so far.
#[derive(Default)]
struct Output {
    offset: u64,
    lines: Lines,
    tail: Tail,
}

impl Output {
    async fn drain(
        &mut self,
        backend: &TensorlakeBackend,
        handle: &Handle,
        process: &ProcessRef,
        progress: &mut (dyn FnMut(&str) + Send),
    ) -> anyhow::Result<()> {
        loop {
            let chunk = backend
                .read_output(handle, process, self.offset, READ_CHUNK)
                .await?;
            if chunk.data.is_empty() || chunk.next_offset <= self.offset {
                return Ok(());
            }
            self.offset = chunk.next_offset;
            for line in self.lines.feed(&chunk.data) {
                progress(&format!("  | {line}"));
                self.tail.push(&line);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recipe_plans_into_shell_steps_with_a_fixed_environment() {
        let recipe =
            Recipe::parse("packages = [\"jq\"]\nsteps = [\"echo built > marker\"]").unwrap();
        let steps = plan("garrison-session", &recipe, "/opt/x:/usr/bin").unwrap();
        let labels: Vec<&str> = steps.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(labels, ["packages", "steps[0]"]);
        assert_eq!(steps[1].argv, ["/bin/sh", "-ec", "echo built > marker"]);
        assert!(
            steps[0].argv[2].contains("apt-get install"),
            "{:?}",
            steps[0]
        );
        assert!(steps[0].argv[2].contains(" jq "), "{:?}", steps[0]);
        assert_eq!(steps[0].env["PATH"], "/opt/x:/usr/bin");
        assert_eq!(steps[0].env["DEBIAN_FRONTEND"], "noninteractive");
        assert_eq!(steps[0].env.len(), 4, "nothing else is passed on");
    }

    #[test]
    fn planning_refuses_bad_names_recipes_and_paths() {
        let recipe = Recipe::default_recipe();
        assert!(plan("Session", &recipe, DEFAULT_STEP_PATH).is_err());
        assert!(plan("ok", &recipe, "").is_err());
        let mut bad = recipe.clone();
        bad.steps.push(" ".to_owned());
        assert!(plan("ok", &bad, DEFAULT_STEP_PATH).is_err());
    }

    #[test]
    fn lines_are_reassembled_across_chunks() {
        let mut lines = Lines::default();
        assert_eq!(lines.feed(b"one\ntw"), ["one"]);
        assert_eq!(lines.feed(b"o\r\nthree"), ["two"]);
        assert_eq!(lines.finish().as_deref(), Some("three"));
        assert_eq!(lines.finish(), None);
    }

    #[test]
    fn the_tail_keeps_the_last_lines_cut_short() {
        let mut tail = Tail::default();
        for i in 0..100 {
            tail.push(&format!("line {i}"));
        }
        tail.push(&"é".repeat(TAIL_LINE_BYTES));
        let kept: Vec<&str> = tail.lines().collect();
        assert_eq!(kept.len(), TAIL_LINES);
        assert_eq!(kept[0], "line 71");
        assert!(kept[TAIL_LINES - 1].len() <= TAIL_LINE_BYTES);
    }

    #[test]
    fn a_failure_names_the_step_its_status_and_its_last_output() {
        let step = &plan(
            "img",
            &Recipe::parse("steps = [\"false\"]").unwrap(),
            "/bin",
        )
        .unwrap()[1];
        let mut tail = Tail::default();
        tail.push("E: Unable to locate package nope");
        let message = step_failure(step, ProcessStatus::Exited(100), &tail);
        assert_eq!(
            message,
            "build step steps[0] exited with status 100; its last output:\n  | E: Unable to locate package nope"
        );
        let killed = step_failure(step, ProcessStatus::Exited(137), &Tail::default());
        assert_eq!(
            killed,
            "build step steps[0] was killed by signal 9 (no output)"
        );
    }
}
