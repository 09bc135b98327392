//! The tables of `garrison image ls`: this machine's images, or a
//! backend's catalog; and how sizes are spelled.

use ::local::images::{Image, names};
use sandbox::plugin::images::CatalogEntry;

/// `image ls`: NAME, ID (short), SIZE, CREATED, CHROME.
pub(super) fn table(images: &[Image]) -> String {
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

/// `240 MiB`, `1.5 GiB`.
pub(super) fn human_size(bytes: u64) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    let mib = bytes as f64 / MIB;
    if mib >= 1024.0 {
        format!("{:.1} GiB", mib / 1024.0)
    } else {
        format!("{mib:.0} MiB")
    }
}

/// `image ls --backend <backend>` of a catalog: NAME, ID, SIZE, CREATED,
/// by name.
pub(super) fn catalog_table(images: &[CatalogEntry]) -> String {
    let mut sorted: Vec<&CatalogEntry> = images.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    let mut rows = vec![["NAME", "ID", "SIZE", "CREATED"].map(str::to_owned)];
    for image in sorted {
        let created = chrono::DateTime::parse_from_rfc3339(&image.created_at)
            .map(|t| t.format("%Y-%m-%d %H:%M UTC").to_string())
            .unwrap_or_else(|_| image.created_at.clone());
        rows.push([
            image.name.clone(),
            image.id.clone(),
            human_size(image.size_bytes),
            created,
        ]);
    }
    let widths: Vec<usize> = (0..4)
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

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

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

    #[test]
    fn the_table_sorts_by_name_and_lines_up() {
        let image = |name: &str, id: &str| CatalogEntry {
            id: id.to_owned(),
            name: name.to_owned(),
            size_bytes: 300 * 1024 * 1024,
            created_at: "2026-12-01T17:00:00.000Z".to_owned(),
        };
        assert_eq!(
            catalog_table(&[image("zeta", "image_2"), image("alpha-long", "image_1")]),
            "NAME        ID       SIZE     CREATED\n\
             alpha-long  image_1  300 MiB  2026-12-01 17:00 UTC\n\
             zeta        image_2  300 MiB  2026-12-01 17:00 UTC\n"
        );
    }
}
