//! `garrison image recipes`: the built-in recipes, as a table and as JSON,
//! with no state directory or image store needed; and a name that is
//! neither a file nor a built-in recipe refused before anything is built.

use crate::common::garrison_bin;

async fn garrison(home: &std::path::Path, args: &[&str]) -> std::process::Output {
    tokio::process::Command::new(garrison_bin())
        .args(args)
        .current_dir(home)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("GARRISON_HOME", home.join("state"))
        .output()
        .await
        .unwrap()
}

#[tokio::test]
async fn image_recipes_lists_default_and_desktop() {
    let home = tempfile::tempdir().unwrap();
    let out = garrison(home.path(), &["image", "recipes"]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let names: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(names, ["default", "desktop"], "{stdout}");
    assert!(stdout.contains("Chromium"), "{stdout}");

    let out = garrison(home.path(), &["image", "recipes", "--json"]).await;
    assert!(out.status.success());
    let recipes: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let desktop = recipes.iter().find(|r| r["name"] == "desktop").unwrap();
    assert_eq!(desktop["recipe"]["desktop"], true);
    assert_eq!(desktop["recipe"]["chromium"], true);
    assert!(desktop["description"].as_str().unwrap().contains("Xvfb"));

    let out = garrison(home.path(), &["image", "recipes", "--help"]).await;
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("--recipe desktop --backend modal"), "{help}");
}

#[tokio::test]
async fn an_unknown_recipe_name_is_refused_naming_the_built_in_ones() {
    let home = tempfile::tempdir().unwrap();
    let out = garrison(
        home.path(),
        &[
            "image",
            "build",
            "x",
            "--recipe",
            "desktpo",
            "--backend",
            "modal",
        ],
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("desktpo") && stderr.contains("default, desktop"),
        "{stderr}"
    );
}
