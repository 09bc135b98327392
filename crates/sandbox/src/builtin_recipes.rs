//! The recipes Garrison ships, by name: what `garrison image recipes`
//! lists and what `--recipe NAME` builds when NAME is not a file.

use std::path::Path;

use anyhow::bail;

use crate::recipe::Recipe;

/// The packages of the `desktop` recipe on top of the default ones: a
/// window manager (matchbox's: one small program that keeps every window
/// maximised, which a remote's screen wants), a small font (Chromium
/// renders nothing legible without one), and the X tools a session uses
/// to check and capture its display (`xdpyinfo`, `xwininfo`, `xprop`
/// from x11-utils; `xwd` from x11-apps).
const DESKTOP_PACKAGES: &[&str] = &[
    "fonts-dejavu-core",
    "matchbox-window-manager",
    "x11-apps",
    "x11-utils",
];

/// A recipe Garrison ships.
#[derive(Clone, Copy, Debug)]
pub struct BuiltinRecipe {
    /// What `--recipe` takes.
    pub name: &'static str,
    /// One line for `garrison image recipes`.
    pub description: &'static str,
    make: fn() -> Recipe,
}

impl BuiltinRecipe {
    /// The recipe itself.
    pub fn recipe(&self) -> Recipe {
        (self.make)()
    }
}

/// Every built-in recipe, in the order they are listed.
pub const BUILTIN_RECIPES: &[BuiltinRecipe] = &[
    BuiltinRecipe {
        name: "default",
        description: "Debian bookworm with git, curl, procps and the usual tools \
                      (what `image build` builds without --recipe)",
        make: Recipe::default_recipe,
    },
    BuiltinRecipe {
        name: "desktop",
        description: "default plus Xvfb, the matchbox window manager, Chromium, \
                      DejaVu fonts and the X tools (xwd, xdpyinfo): for SANDBOX_DESKTOP",
        make: desktop_recipe,
    },
];

fn desktop_recipe() -> Recipe {
    let mut recipe = Recipe::default_recipe();
    recipe
        .packages
        .extend(DESKTOP_PACKAGES.iter().map(|p| (*p).to_owned()));
    recipe.chromium = true;
    recipe.desktop = true;
    recipe
}

/// The built-in recipe called `name`.
pub fn builtin_recipe(name: &str) -> Option<Recipe> {
    BUILTIN_RECIPES
        .iter()
        .find(|b| b.name == name)
        .map(BuiltinRecipe::recipe)
}

impl Recipe {
    /// What `--recipe ARG` means: the file ARG when it exists (a file wins,
    /// so a recipe file called `desktop` in the working directory is still
    /// read), else the built-in recipe of that name.
    pub fn file_or_builtin(arg: &Path) -> anyhow::Result<Self> {
        if arg.exists() {
            return Self::load(arg);
        }
        if let Some(recipe) = arg.to_str().and_then(builtin_recipe) {
            return Ok(recipe);
        }
        let names: Vec<&str> = BUILTIN_RECIPES.iter().map(|b| b.name).collect();
        bail!(
            "no recipe file {} and no built-in recipe of that name (built-in: {}; \
             `garrison image recipes` lists them)",
            arg.display(),
            names.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_and_desktop_are_built_in() {
        let names: Vec<&str> = BUILTIN_RECIPES.iter().map(|b| b.name).collect();
        assert_eq!(names, ["default", "desktop"]);
        assert_eq!(builtin_recipe("default"), Some(Recipe::default_recipe()));
        for b in BUILTIN_RECIPES {
            b.recipe().validate().unwrap();
            assert!(!b.description.contains('\n'), "{}", b.name);
        }
    }

    #[test]
    fn the_desktop_recipe_has_an_x_server_a_window_manager_a_browser_and_fonts() {
        let recipe = builtin_recipe("desktop").unwrap();
        let packages = recipe.all_packages();
        for needed in [
            "xvfb",
            "matchbox-window-manager",
            "chromium",
            "fonts-dejavu-core",
            "x11-apps",
            "git",
            "curl",
        ] {
            assert!(packages.iter().any(|p| p == needed), "{needed}");
        }
        assert_eq!(recipe.xvfb_path().as_deref(), Some(crate::XVFB_PATH));
        assert_eq!(recipe.chrome_path().as_deref(), Some(crate::CHROMIUM_PATH));
    }

    #[test]
    fn a_file_wins_over_a_built_in_name() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("desktop");
        std::fs::write(&file, "packages = [\"python3\"]").unwrap();
        let from_file = Recipe::file_or_builtin(&file).unwrap();
        assert!(from_file.all_packages().contains(&"python3".to_owned()));
        assert!(!from_file.desktop);

        let built_in = Recipe::file_or_builtin(Path::new("desktop")).unwrap();
        assert!(built_in.desktop);

        let err = Recipe::file_or_builtin(&dir.path().join("nope"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("nope") && err.contains("default, desktop"),
            "{err}"
        );
    }
}
