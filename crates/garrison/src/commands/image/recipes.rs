//! `garrison image recipes`: the built-in recipes, by name.

use sandbox::{BUILTIN_RECIPES, Recipe};

/// One recipe of `image recipes --json`.
#[derive(serde::Serialize)]
struct RecipeView {
    name: &'static str,
    description: &'static str,
    recipe: Recipe,
}

pub(super) fn print(json: bool) -> anyhow::Result<()> {
    if json {
        let views: Vec<RecipeView> = BUILTIN_RECIPES
            .iter()
            .map(|b| RecipeView {
                name: b.name,
                description: b.description,
                recipe: b.recipe(),
            })
            .collect();
        return crate::output::json(&views);
    }
    crate::output::print(&listing())
}

/// Name and description, one recipe a line, the names padded to line up.
fn listing() -> String {
    let width = BUILTIN_RECIPES
        .iter()
        .map(|b| b.name.len())
        .max()
        .unwrap_or(0);
    BUILTIN_RECIPES
        .iter()
        .map(|b| format!("{:width$}  {}\n", b.name, b.description))
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn one_line_a_recipe_with_its_name_first() {
        let listing = super::listing();
        let names: Vec<&str> = listing
            .lines()
            .map(|l| l.split_whitespace().next().unwrap())
            .collect();
        assert_eq!(names, ["default", "desktop"]);
    }
}
