"""Modal's official client (`modal`, the version requirements.txt pins)
drives `garrison mock modal`.

The live service cannot be reached from here, so the client is the ground
truth for what the mock must answer: each test uses one part of the client's
public API the way a user would, with MODAL_SERVER_URL pointing at the mock
and a test token. A call the client makes that the mock lacks fails the test
that makes it, so a gap in the mock shows up here by name.

The client's defaults are kept (V2 sandboxes: `SandboxCreateV2`, processes
through the task command router), because those are what the client uses
against the real service.
"""

import os
import time
import uuid

import pytest

from conftest import RunningMock

TOKEN_ID = "ak-pytest-modal"
TOKEN_SECRET = "as-pytest-modal"
# The mock's ready base image (the host, as far as the mock goes).
BASE_IMAGE = "im-mockbase"
# Generous bounds: they only stop a hung test, they time nothing.
WAIT = 60


@pytest.fixture(scope="module")
def mock():
    running = RunningMock(
        "modal",
        {"MODAL_TOKEN_ID": TOKEN_ID, "MODAL_TOKEN_SECRET": TOKEN_SECRET},
        lines=1,
    )
    yield running
    running.stop()


@pytest.fixture(scope="module")
def modal(mock):
    """The `modal` package, configured as a user would: by environment."""
    saved = {k: os.environ.get(k) for k in _MODAL_ENV}
    os.environ.update(
        {
            "MODAL_SERVER_URL": mock.vars["MODAL_SERVER_URL"],
            "MODAL_TOKEN_ID": TOKEN_ID,
            "MODAL_TOKEN_SECRET": TOKEN_SECRET,
            # No ~/.modal.toml of the machine running the tests.
            "MODAL_CONFIG_PATH": os.path.join(mock.root, "modal.toml"),
        }
    )
    import modal as modal_package

    yield modal_package
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


_MODAL_ENV = ("MODAL_SERVER_URL", "MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET", "MODAL_CONFIG_PATH")


@pytest.fixture(scope="module")
def app(modal):
    return modal.App.lookup("garrison-pytest", create_if_missing=True)


@pytest.fixture(scope="module")
def image(modal, mock):
    return modal.Image.from_id(BASE_IMAGE)


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def sleeper(modal, app, image, **kwargs):
    return modal.Sandbox.create("sleep", "3600", app=app, image=image, **kwargs)


# Prints alive (running or sleeping) or gone for the process whose pid is in
# $PID: a killed process may linger as a zombie until reaped, which `kill -0`
# still finds, and a process still stopped in a snapshot is not alive either.
ALIVE = 'if grep -qs "^State:[[:space:]]*[RSD]" "/proc/$PID/status"; then echo alive; else echo gone; fi'


def run(sb, *argv, **kwargs):
    """Runs argv in the sandbox and returns (exit code, stdout, stderr)."""
    p = sb.exec(*argv, **kwargs)
    code = p.wait()
    return code, p.stdout.read(), p.stderr.read()


def test_app_lookup_creates_once_and_finds_it_again(modal):
    name = unique("app")
    with pytest.raises(modal.exception.NotFoundError):
        modal.App.lookup(name)
    first = modal.App.lookup(name, create_if_missing=True)
    again = modal.App.lookup(name)
    assert first.app_id and first.app_id == again.app_id


def test_image_from_id_resolves_a_known_image_and_refuses_an_unknown_one(modal, app):
    # Image.from_id is lazy: the image is looked up when a sandbox uses it.
    sb = modal.Sandbox.create("true", app=app, image=modal.Image.from_id(BASE_IMAGE))
    sb.wait()
    assert sb.returncode == 0
    with pytest.raises(modal.exception.NotFoundError):
        modal.Sandbox.create("true", app=app, image=modal.Image.from_id("im-does-not-exist"))


def test_sandbox_create_records_resources_timeout_tags_and_name(modal, app, image):
    name = unique("sb")
    sb = sleeper(
        modal,
        app,
        image,
        name=name,
        timeout=600,
        cpu=1.5,
        memory=2048,
        block_network=True,
    )
    try:
        sb.set_tags({"garrison-session": "s1", "role": "test"})
        assert sb.get_tags() == {"garrison-session": "s1", "role": "test"}
        assert sb.poll() is None
        found = modal.Sandbox.from_name(app.name, name)
        assert found.object_id == sb.object_id
    finally:
        sb.terminate()


def test_sandbox_create_with_a_cidr_allowlist(modal, app, image):
    sb = sleeper(modal, app, image, outbound_cidr_allowlist=["10.0.0.0/8"])
    try:
        assert sb.poll() is None
    finally:
        sb.terminate()


def test_exec_passes_env_and_reads_stdout_stderr_and_the_exit_code(modal, app, image):
    sb = sleeper(modal, app, image)
    try:
        code, out, err = run(
            sb,
            "sh",
            "-c",
            'echo "out:$GREETING"; echo "err:$GREETING" >&2; exit 7',
            env={"GREETING": "hello"},
        )
        assert code == 7
        assert out == "out:hello\n"
        assert err == "err:hello\n"
    finally:
        sb.terminate()


def test_exec_stdout_is_read_whole_when_long(modal, app, image):
    sb = sleeper(modal, app, image)
    try:
        code, out, _ = run(sb, "sh", "-c", "seq 1 20000")
        assert code == 0
        assert out.splitlines()[-1] == "20000"
        assert len(out.splitlines()) == 20000
    finally:
        sb.terminate()


def test_wait_returns_the_entrypoint_exit_code(modal, app, image):
    sb = modal.Sandbox.create("sh", "-c", "exit 3", app=app, image=image)
    sb.wait()
    assert sb.returncode == 3


def test_terminate_ends_the_sandbox(modal, app, image):
    sb = sleeper(modal, app, image)
    sb.terminate()
    sb.wait(raise_on_termination=False)
    assert sb.returncode is not None


def test_filesystem_snapshot_and_a_sandbox_created_from_it(modal, app, image):
    sb = sleeper(modal, app, image)
    try:
        assert run(sb, "sh", "-c", "echo kept > kept.txt")[0] == 0
        snapshot = sb.snapshot_filesystem()
    finally:
        sb.terminate()
    restored = sleeper(modal, app, snapshot)
    try:
        code, out, _ = run(restored, "cat", "kept.txt")
        assert (code, out) == (0, "kept\n")
    finally:
        restored.terminate()


def test_memory_snapshot_and_restore_keep_a_running_process(modal, app, image):
    sb = modal.Sandbox.create(
        "sleep", "3600", app=app, image=image, _experimental_enable_snapshot=True
    )
    try:
        # A process started before the snapshot ...
        assert run(sb, "sh", "-c", "nohup sleep 3000 >/dev/null 2>&1 & echo $! > pid")[0] == 0
        snapshot = sb._experimental_snapshot()
    finally:
        sb.terminate()
    restored = modal.Sandbox._experimental_from_snapshot(snapshot)
    try:
        # ... is still running in the restored sandbox.
        code, out, err = run(restored, "sh", "-c", f'PID="$(cat pid)"; {ALIVE}')
        assert (code, out) == (0, "alive\n"), err
    finally:
        restored.terminate()


def test_without_a_memory_snapshot_terminate_ends_the_processes(modal, app, image):
    # The control for the test above: what survives there survives because
    # of the snapshot, not because a process outlives its sandbox.
    sb = sleeper(modal, app, image)
    code, pid, _ = run(sb, "sh", "-c", "nohup sleep 3000 >/dev/null 2>&1 & echo $!")
    assert code == 0
    sb.terminate()
    sb.wait(raise_on_termination=False)
    other = sleeper(modal, app, image)
    try:
        code, out, _ = run(other, "sh", "-c", f"PID={pid.strip()}; {ALIVE}")
        assert out == "gone\n"
    finally:
        other.terminate()


def test_network_access_is_set_on_a_running_sandbox(modal, app, image):
    sb = sleeper(modal, app, image, block_network=False)
    try:
        sb._experimental_set_outbound_network_policy(outbound_cidr_allowlist=["192.168.0.0/16"])
        sb._experimental_set_outbound_network_policy()
        assert sb.poll() is None
    finally:
        sb.terminate()


def test_sandbox_list_by_tag(modal, app, image):
    tag = unique("tag")
    tagged = sleeper(modal, app, image)
    other = sleeper(modal, app, image)
    try:
        tagged.set_tags({"garrison-test": tag})
        deadline = time.monotonic() + WAIT
        found = []
        while time.monotonic() < deadline:
            found = [s.object_id for s in modal.Sandbox.list(app_id=app.app_id, tags={"garrison-test": tag})]
            if found:
                break
            time.sleep(0.2)
        assert found == [tagged.object_id]
    finally:
        tagged.terminate()
        other.terminate()


def test_from_name_finds_a_running_named_sandbox(modal, app, image):
    name = unique("named")
    sb = sleeper(modal, app, image, name=name)
    try:
        assert modal.Sandbox.from_name(app.name, name).object_id == sb.object_id
    finally:
        sb.terminate()
    with pytest.raises(modal.exception.NotFoundError):
        modal.Sandbox.from_name(app.name, unique("absent"))
