//! Image recipes: a small TOML description of a Debian root filesystem.
//!
//! ```toml
//! suite = "bookworm"                      # Debian suite (default bookworm)
//! mirror = "http://deb.debian.org/debian" # optional; mmdebstrap's default otherwise
//! packages = ["python3", "make"]          # on top of the base packages
//! steps = ["useradd -m dev"]              # shell, run as root in the image
//! chromium = true                         # Debian's chromium; sets DEVIN_CHROME_PATH
//! desktop = false                         # Debian's Xvfb, for SANDBOX_DESKTOP
//! ffmpeg = false                          # Debian's ffmpeg
//! ```
//!
//! [`BASE_PACKAGES`] are always installed, whatever the recipe lists:
//! without them `devin-remote` cannot work (it needs `git` on `PATH` and
//! certificates for HTTPS).

use std::path::Path;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Installed in every image: what `devin-remote` itself needs.
pub const BASE_PACKAGES: &[&str] = &["ca-certificates", "git"];

/// The extra packages of [`Recipe::default_recipe`]: the tools a session
/// expects on any Linux box.
const DEFAULT_PACKAGES: &[&str] = &[
    "bash",
    "coreutils",
    "curl",
    "less",
    "openssh-client",
    "procps",
    "xz-utils",
];

/// Where Debian's Chromium puts its binary.
pub const CHROMIUM_PATH: &str = "/usr/bin/chromium";

/// Where Debian's `xvfb` package puts the virtual X server.
pub const XVFB_PATH: &str = "/usr/bin/Xvfb";

const DEFAULT_SUITE: &str = "bookworm";

/// Bumped when the meaning of a recipe changes (new base packages, another
/// bootstrap), so old and new builds never share an id.
const RECIPE_FORMAT: &str = "garrison-recipe-v1";

/// What to build. See the module documentation for the file format.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recipe {
    /// The Debian suite (default bookworm).
    #[serde(default = "default_suite")]
    pub suite: String,
    /// The Debian mirror; mmdebstrap's default when `None`.
    #[serde(default)]
    pub mirror: Option<String>,
    /// Debian packages on top of [`BASE_PACKAGES`].
    #[serde(default)]
    pub packages: Vec<String>,
    /// Shell snippets run in order with `/bin/sh -e` as root inside the
    /// image, after the packages are installed.
    #[serde(default)]
    pub steps: Vec<String>,
    /// Installs Debian's chromium and sets `DEVIN_CHROME_PATH`.
    #[serde(default)]
    pub chromium: bool,
    /// Installs Debian's ffmpeg.
    #[serde(default)]
    pub ffmpeg: bool,
    /// Installs Xvfb, the X server a sandbox's desktop runs on (started
    /// only where the local backend's `SANDBOX_DESKTOP` is on).
    #[serde(default)]
    pub desktop: bool,
}

fn default_suite() -> String {
    DEFAULT_SUITE.to_owned()
}

impl Recipe {
    /// The recipe of `garrison image build NAME` without `--recipe`.
    pub fn default_recipe() -> Self {
        Self {
            suite: default_suite(),
            mirror: None,
            packages: DEFAULT_PACKAGES.iter().map(|p| (*p).to_owned()).collect(),
            steps: Vec::new(),
            chromium: false,
            ffmpeg: false,
            desktop: false,
        }
    }

    /// Parses and checks a recipe. Unknown keys are errors (a typo must not
    /// silently build something else); the message names the key.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let recipe: Self = toml::from_str(text).map_err(|err| anyhow::anyhow!("{err}"))?;
        recipe.validate()?;
        Ok(recipe)
    }

    /// Reads and parses a recipe file.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading recipe {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("recipe {}", path.display()))
    }

    /// Checks every value that ends up on mmdebstrap's command line, so a
    /// value can never be read as an option or split into two.
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.suite.is_empty()
            || !self
                .suite
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            bail!(
                "suite = {:?}: expected a Debian suite such as \"bookworm\"",
                self.suite
            );
        }
        if let Some(mirror) = &self.mirror {
            let scheme_ok = ["http://", "https://", "file:/"]
                .iter()
                .any(|s| mirror.starts_with(s));
            if !scheme_ok || mirror.chars().any(|c| c.is_whitespace() || c.is_control()) {
                bail!("mirror = {mirror:?}: expected an http://, https:// or file:/ URL");
            }
        }
        for package in &self.packages {
            let ok = package
                .bytes()
                .next()
                .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
                && package.bytes().all(|b| {
                    b.is_ascii_lowercase()
                        || b.is_ascii_digit()
                        || matches!(b, b'+' | b'-' | b'.' | b':' | b'=' | b'~' | b'/')
                });
            if !ok {
                bail!("packages: {package:?} is not a Debian package name");
            }
        }
        for (i, step) in self.steps.iter().enumerate() {
            if step.trim().is_empty() || step.contains('\0') {
                bail!("steps[{i}]: empty, or contains a NUL byte");
            }
        }
        Ok(())
    }

    /// Every package to install: the base, the recipe's, Chromium and
    /// ffmpeg when asked for; sorted and without duplicates (install order
    /// does not matter to apt).
    pub fn all_packages(&self) -> Vec<String> {
        let mut all: Vec<String> = BASE_PACKAGES.iter().map(|p| (*p).to_owned()).collect();
        all.extend(self.packages.iter().cloned());
        if self.chromium {
            all.push("chromium".to_owned());
        }
        if self.ffmpeg {
            all.push("ffmpeg".to_owned());
        }
        if self.desktop {
            all.push("xvfb".to_owned());
        }
        all.sort();
        all.dedup();
        all
    }

    /// `DEVIN_CHROME_PATH` for images of this recipe.
    pub fn chrome_path(&self) -> Option<String> {
        self.chromium.then(|| CHROMIUM_PATH.to_owned())
    }

    /// The X server of images of this recipe, for a desktop.
    pub fn xvfb_path(&self) -> Option<String> {
        self.desktop.then(|| XVFB_PATH.to_owned())
    }

    /// SHA-256 (hex) over the recipe's canonical form: what is installed
    /// and run, so two recipes that differ only in package order or
    /// formatting hash the same.
    pub fn hash(&self) -> String {
        let canonical = serde_json::json!({
            "format": RECIPE_FORMAT,
            "suite": self.suite,
            "mirror": self.mirror,
            "packages": self.all_packages(),
            "steps": self.steps,
        });
        hex::encode(Sha256::digest(canonical.to_string().as_bytes()))
    }
}

/// One shell step of a recipe, for the builders that run a recipe as a
/// sequence of commands on a Debian-like base (Modal's image builder, a
/// Tensorlake builder sandbox) rather than through mmdebstrap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShellStep {
    /// What the step is, for progress lines and errors: `apt sources`,
    /// `packages`, or `steps[N]` as the recipe file counts them.
    pub label: String,
    /// Run with `/bin/sh -ec`, as root.
    pub script: String,
}

impl Recipe {
    /// The recipe as shell steps, in order: the mirror (when one is set)
    /// as apt's only source for the recipe's suite, every package of
    /// [`Recipe::all_packages`] in one `apt-get install`, then each of the
    /// recipe's own steps. Validates the recipe first: the mirror and the
    /// package names end up in a shell command.
    pub fn shell_steps(&self) -> anyhow::Result<Vec<ShellStep>> {
        self.validate()?;
        let mut steps = Vec::new();
        if let Some(mirror) = &self.mirror {
            // Validated: one URL, no spaces, quotes or control characters
            // cannot reach the shell unquoted (`validate` refuses them).
            steps.push(ShellStep {
                label: "apt sources".to_owned(),
                script: format!(
                    "rm -f /etc/apt/sources.list.d/debian.sources && \
                     echo 'deb {mirror} {suite} main' > /etc/apt/sources.list",
                    suite = self.suite
                ),
            });
        }
        steps.push(ShellStep {
            label: "packages".to_owned(),
            script: format!(
                "apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y \
                 --no-install-recommends {} && rm -rf /var/lib/apt/lists/*",
                self.all_packages().join(" ")
            ),
        });
        steps.extend(self.steps.iter().enumerate().map(|(i, step)| ShellStep {
            label: format!("steps[{i}]"),
            script: step.clone(),
        }));
        Ok(steps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_is_the_bare_base() {
        let recipe = Recipe::parse("").unwrap();
        assert_eq!(recipe.suite, "bookworm");
        assert_eq!(recipe.all_packages(), vec!["ca-certificates", "git"]);
        assert_eq!(recipe.chrome_path(), None);
        assert_eq!(recipe.xvfb_path(), None);
    }

    #[test]
    fn a_desktop_recipe_installs_xvfb() {
        let recipe = Recipe::parse("desktop = true").unwrap();
        assert_eq!(
            recipe.all_packages(),
            vec!["ca-certificates", "git", "xvfb"]
        );
        assert_eq!(recipe.xvfb_path().as_deref(), Some("/usr/bin/Xvfb"));
        assert_ne!(recipe.hash(), Recipe::parse("").unwrap().hash());
    }

    #[test]
    fn full_recipe() {
        let recipe = Recipe::parse(
            r#"
            suite = "trixie"
            mirror = "http://deb.debian.org/debian"
            packages = ["python3", "git", "g++"]
            steps = ["echo hi > /etc/hi"]
            chromium = true
            ffmpeg = true
            "#,
        )
        .unwrap();
        assert_eq!(recipe.suite, "trixie");
        assert_eq!(
            recipe.all_packages(),
            vec![
                "ca-certificates",
                "chromium",
                "ffmpeg",
                "g++",
                "git",
                "python3"
            ]
        );
        assert_eq!(recipe.chrome_path().as_deref(), Some("/usr/bin/chromium"));
    }

    #[test]
    fn errors_name_the_key() {
        let err = Recipe::parse("pakages = [\"x\"]").unwrap_err().to_string();
        assert!(err.contains("pakages"), "{err}");
        let err = Recipe::parse("chromium = \"yes\"").unwrap_err().to_string();
        assert!(err.contains("chromium"), "{err}");
        let err = Recipe::parse("packages = [\"--root=x\"]")
            .unwrap_err()
            .to_string();
        assert!(err.contains("packages"), "{err}");
        let err = Recipe::parse("packages = [\"a,b\"]")
            .unwrap_err()
            .to_string();
        assert!(err.contains("packages"), "{err}");
        let err = Recipe::parse("suite = \"../x\"").unwrap_err().to_string();
        assert!(err.contains("suite"), "{err}");
        let err = Recipe::parse("mirror = \"-o x\"").unwrap_err().to_string();
        assert!(err.contains("mirror"), "{err}");
        let err = Recipe::parse("steps = [\"  \"]").unwrap_err().to_string();
        assert!(err.contains("steps[0]"), "{err}");
    }

    #[test]
    fn hash_is_canonical() {
        let a = Recipe::parse("packages = [\"b\", \"a\"]").unwrap();
        let b = Recipe::parse("packages = [\"a\", \"b\", \"a\"]\nsuite = \"bookworm\"").unwrap();
        assert_eq!(a.hash(), b.hash());
        let c = Recipe::parse("packages = [\"a\", \"b\"]\nsteps = [\"true\"]").unwrap();
        assert_ne!(a.hash(), c.hash());
        assert_ne!(
            Recipe::default_recipe().hash(),
            Recipe::parse("").unwrap().hash()
        );
    }

    #[test]
    fn default_recipe_has_what_the_remote_needs() {
        let packages = Recipe::default_recipe().all_packages();
        for needed in ["git", "ca-certificates", "curl", "procps", "coreutils"] {
            assert!(packages.iter().any(|p| p == needed), "{needed}");
        }
    }

    #[test]
    fn shell_steps_install_then_run_the_recipe_steps_in_order() {
        let recipe = Recipe::parse(
            r#"
            mirror = "http://mirror.example/debian"
            packages = ["python3"]
            chromium = true
            steps = ["echo one", "echo 'two'"]
            "#,
        )
        .unwrap();
        let steps = recipe.shell_steps().unwrap();
        let labels: Vec<&str> = steps.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(labels, ["apt sources", "packages", "steps[0]", "steps[1]"]);
        assert!(
            steps[0]
                .script
                .contains("deb http://mirror.example/debian bookworm main")
        );
        assert!(
            steps[1].script.contains(
                "install -y --no-install-recommends ca-certificates chromium git python3 &&"
            ),
            "{}",
            steps[1].script
        );
        assert_eq!(steps[3].script, "echo 'two'");
        let bare = Recipe::parse("").unwrap().shell_steps().unwrap();
        assert_eq!(bare.len(), 1, "no mirror step without a mirror");
    }

    #[test]
    fn shell_steps_refuse_an_invalid_recipe() {
        let mut recipe = Recipe::default_recipe();
        recipe.packages.push("a;rm -rf /".to_owned());
        assert!(recipe.shell_steps().is_err());
    }
}
