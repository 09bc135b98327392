//! The image store's names, ids and work directories, on a real directory.

use super::*;

fn id(n: u8) -> String {
    super::super::names::id_from_digest(&[n; 32])
}

/// Installs a one-file image, as build and import do.
fn install(store: &ImageStore, name: &str, id: &str, content: &str) -> Image {
    let work = store.temp_dir().unwrap();
    fs::create_dir(work.rootfs()).unwrap();
    fs::write(work.rootfs().join("marker"), content).unwrap();
    store
        .install(
            work,
            Image {
                id: id.to_owned(),
                name: name.to_owned(),
                rootfs: PathBuf::new(),
                created_at_ms: 1,
                size_bytes: content.len() as u64,
                chrome_path: None,
                xvfb_path: None,
                source: "test".to_owned(),
            },
        )
        .unwrap()
}

fn marker(image: &Image) -> String {
    fs::read_to_string(image.rootfs.join("marker")).unwrap()
}

#[test]
fn a_name_moves_an_id_stays() {
    let dir = tempfile::tempdir().unwrap();
    let store = ImageStore::open(dir.path()).unwrap();
    let first = install(&store, "default", &id(1), "one");
    assert_eq!(
        first.rootfs,
        dir.path().join("store").join(id(1)).join("rootfs")
    );
    assert_eq!(store.resolve("default").unwrap(), first);

    install(&store, "default", &id(2), "two");
    let now = store.resolve("default").unwrap();
    assert_eq!(
        (now.id.as_str(), marker(&now).as_str()),
        (id(2).as_str(), "two")
    );
    // A session or snapshot that recorded the old id still finds it.
    let old = store.resolve(&id(1)).unwrap();
    assert_eq!(marker(&old), "one");
    assert_eq!(store.resolve(short(&id(1))).unwrap().id, id(1));

    let listed: Vec<(String, String)> = store
        .list()
        .unwrap()
        .into_iter()
        .map(|i| (i.name, i.id))
        .collect();
    assert_eq!(
        listed,
        vec![("default".to_owned(), id(2)), (String::new(), id(1))]
    );
    // Reopening keeps everything; no work directories are left.
    let store = ImageStore::open(dir.path()).unwrap();
    assert_eq!(store.resolve("default").unwrap().id, id(2));
    assert_eq!(
        list_dir(&dir.path().join("tmp")).unwrap(),
        Vec::<String>::new()
    );
}

fn short(id: &str) -> &str {
    super::super::names::short_id(id)
}

#[test]
fn remove_refuses_while_in_use_and_keeps_shared_content() {
    let dir = tempfile::tempdir().unwrap();
    let store = ImageStore::open(dir.path()).unwrap();
    install(&store, "a", &id(1), "one");
    install(&store, "b", &id(1), "one");
    let used = id(1);
    let err = store
        .remove("a", &|image| image == used)
        .unwrap_err()
        .to_string();
    assert!(err.contains("in use"), "{err}");
    assert!(store.resolve("a").is_ok());

    store.remove("a", &|_| false).unwrap();
    assert!(store.resolve("a").is_err());
    // "b" still points at the content.
    assert_eq!(marker(&store.resolve("b").unwrap()), "one");
    store.remove("b", &|_| false).unwrap();
    assert!(
        store.resolve(&id(1)).is_err(),
        "content goes with its last name"
    );
    assert!(store.remove("b", &|_| false).is_err());
}

#[test]
fn unnamed_images_are_removed_by_id_or_pruned() {
    let dir = tempfile::tempdir().unwrap();
    let store = ImageStore::open(dir.path()).unwrap();
    install(&store, "x", &id(1), "one");
    install(&store, "x", &id(2), "two");
    install(&store, "x", &id(3), "three");
    assert!(store.prune(&|_| true).unwrap().is_empty());
    assert_eq!(store.prune(&|image| image == id(1)).unwrap(), vec![id(2)]);
    let err = store.remove(&id(1), &|_| true).unwrap_err().to_string();
    assert!(err.contains("in use"), "{err}");
    store.remove(&id(1), &|_| false).unwrap();
    // By id, names pointing at it go too.
    store.remove(&id(3), &|_| false).unwrap();
    assert!(store.list().unwrap().is_empty());
}

#[test]
fn hostile_names_never_reach_a_path() {
    let dir = tempfile::tempdir().unwrap();
    let store = ImageStore::open(dir.path()).unwrap();
    for bad in ["../x", "a/b", "", ".names", "sha256-../../etc"] {
        assert!(store.resolve(bad).is_err(), "{bad}");
        assert!(store.remove(bad, &|_| false).is_err(), "{bad}");
    }
    // A corrupt pointer is an error naming the file, not a path.
    fs::write(dir.path().join("names/evil"), "../../etc\n").unwrap();
    let err = format!("{:#}", store.resolve("evil").unwrap_err());
    assert!(err.contains("names/evil"), "{err}");
}

#[test]
fn crashed_work_is_cleaned_and_dropped_work_vanishes() {
    let dir = tempfile::tempdir().unwrap();
    let store = ImageStore::open(dir.path()).unwrap();
    let work = store.temp_dir().unwrap();
    let path = work.path().to_owned();
    fs::create_dir(work.rootfs()).unwrap();
    drop(work);
    assert!(!path.exists());

    // pid 0 never names a live process of ours: a dead build's leftovers.
    let leftover = dir.path().join("tmp/0-deadbeef");
    fs::create_dir_all(leftover.join("rootfs/etc")).unwrap();
    ImageStore::open(dir.path()).unwrap();
    assert!(!leftover.exists());
    assert!(
        store.list().unwrap().is_empty(),
        "half images are never listed"
    );
}

#[test]
fn records_without_a_format_read_and_newer_ones_are_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store = ImageStore::open(dir.path()).unwrap();
    let image = install(&store, "default", &id(1), "one");
    let path = dir.path().join("store").join(id(1)).join(META_FILE);
    let mut record: serde_json::Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    assert_eq!(record["format"], 1);

    // As releases before formats wrote it.
    record.as_object_mut().unwrap().remove("format");
    fs::write(&path, serde_json::to_vec_pretty(&record).unwrap()).unwrap();
    assert_eq!(store.resolve("default").unwrap(), image);

    record["format"] = 999.into();
    let newer = serde_json::to_vec_pretty(&record).unwrap();
    fs::write(&path, &newer).unwrap();
    for err in [
        store.resolve("default").unwrap_err(),
        store.remove("default", &|_| false).unwrap_err(),
    ] {
        let message = format!("{err:#}");
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert!(message.contains("a newer Garrison wrote it"), "{message}");
    }
    // Unnamed, it is still not pruned.
    fs::remove_file(dir.path().join("names/default")).unwrap();
    assert!(store.prune(&|_| false).is_err());
    assert_eq!(fs::read(&path).unwrap(), newer);
    assert_eq!(marker(&image), "one");
}
