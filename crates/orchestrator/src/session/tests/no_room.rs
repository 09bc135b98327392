//! A full disk under the state store (`SQLITE_FULL`, simulated): a session
//! that got past `claimed` keeps running and its runner waits for room,
//! its output offset kept in memory meanwhile; once a record fits again it
//! goes on. A session that never started is still given back at once.

use std::os::unix::process::CommandExt;

use super::*;

/// A bounded wait for `check`, for a state the runner reaches by itself.
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A process that runs until killed, in a group of its own, recorded as
/// the sandbox's process `name` (as the shim records a remote), with
/// `output` already written.
fn live_process(world: &World, handle: &Handle, name: &str, output: &[u8]) -> std::process::Child {
    let child = std::process::Command::new("sleep")
        .arg("600")
        .process_group(0)
        .spawn()
        .unwrap();
    fake_output(world, handle, name, output);
    let dir = world
        .dir
        .path()
        .join("host/sandboxes")
        .join(&handle.name)
        .join("proc")
        .join(name);
    let start = shim::proc_start_time(child.id()).unwrap();
    std::fs::write(
        dir.join(shim::CHILD_PID_FILE),
        format!("{} {start}", child.id()),
    )
    .unwrap();
    child
}

fn stored(world: &World) -> SessionRecord {
    world
        .store
        .session(&fleet::SessionId::new(SESSION).unwrap())
        .unwrap()
        .unwrap()
}

#[tokio::test]
async fn a_running_session_waits_out_a_full_disk_and_goes_on_once_its_record_fits() {
    let world = World::new().await;
    let handle = world.sandbox().await;
    let mut remote = live_process(&world, &handle, "remote-1", b"hello\n");
    let mut rec = record(Stage::Running, Some(handle.clone()));
    rec.process = Some(ProcessRef {
        id: "remote-1".into(),
    });
    world.store.put_session(&rec).unwrap();
    world.store.fill_disk(true);
    let runner = world.runner(rec);
    let stopping = runner.deps.stopping.clone();
    let task = tokio::spawn(runner.run());

    // The output is copied; its offset finds no room, which stops nothing.
    eventually("the output offset refused", || world.store.out_of_space()).await;
    let log = world
        .dir
        .path()
        .join("sessions")
        .join(sandbox::hashed_id(SESSION))
        .join(crate::session_log::REMOTE_LOG);
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "hello\n");

    // The remote exits: its restart must be recorded first, and is not.
    remote.kill().unwrap();
    remote.wait().unwrap();
    let proc_dir = world
        .dir
        .path()
        .join("host/sandboxes")
        .join(&handle.name)
        .join("proc/remote-1");
    std::fs::write(proc_dir.join(shim::EXIT_FILE), "1").unwrap();
    let refused = world.store.writes();
    eventually("the record tried again and again", || {
        world.store.writes() >= refused + 3 || task.is_finished()
    })
    .await;
    assert!(
        !task.is_finished(),
        "the runner stopped on a full disk: {:?}",
        task.await
    );
    assert_eq!(stored(&world).process.unwrap().id, "remote-1");

    // Room again: the record is written, the session goes on from it.
    world.store.fill_disk(false);
    eventually("the restart recorded", || {
        stored(&world).process.is_some_and(|p| p.id != "remote-1")
    })
    .await;
    // The offset kept in memory meanwhile: nothing was copied twice.
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "hello\n");
    stopping.cancel();
    tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .expect("the runner stops")
        .unwrap();
}

#[tokio::test]
async fn a_session_never_started_is_given_back_when_the_disk_is_full() {
    let world = World::new().await;
    let rec = record(Stage::Claimed, None);
    world.store.put_session(&rec).unwrap();
    world.store.fill_disk(true);

    assert_eq!(run(world.runner(rec)).await, RunnerEnd::RecordFailed);

    assert!(world.backend.list().await.unwrap().is_empty());
    assert_eq!(world.releases(), 1);
    assert_eq!(stored(&world).stage, Stage::Claimed);
}

#[tokio::test]
async fn stopping_ends_the_wait_for_room_and_leaves_the_last_record() {
    let world = World::new().await;
    let handle = world.sandbox().await;
    let rec = record(Stage::Starting, Some(handle));
    world.store.put_session(&rec).unwrap();
    world.store.fill_disk(true);
    let runner = world.runner(rec);
    let stopping = runner.deps.stopping.clone();
    let task = tokio::spawn(runner.run());
    let before = world.store.writes();
    eventually("the record tried again and again", || {
        world.store.writes() >= before + 3 || task.is_finished()
    })
    .await;
    assert!(world.store.out_of_space());
    assert!(!task.is_finished(), "the runner stopped before it was told");

    stopping.cancel();
    let end = tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .expect("the runner stops")
        .unwrap();

    assert_eq!(end, RunnerEnd::RecordFailed);
    assert_eq!(world.releases(), 0, "a sandbox exists: the claim is kept");
    assert_eq!(stored(&world).stage, Stage::Starting);
}
