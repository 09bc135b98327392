"""The official Tensorlake SDK (`tensorlake`, pinned in requirements.txt)
drives `garrison mock tensorlake` through the lifecycle a Garrison session
uses: what the SDK sends, the mock must answer as the service does.

The SDK is pointed at the mock the way a user points it at a private
deployment: `TENSORLAKE_API_URL` for the API and `TENSORLAKE_SANDBOX_API_URL`
for the lifecycle calls, both as the mock printed them. Paths given to the
files and process APIs are host paths inside the sandbox's directory
(`TENSORLAKE_SANDBOX_ROOT`), as the mock documents.
"""

import json
import os
import signal
import threading
import time
import urllib.request
import uuid

import pytest

from conftest import RunningMock

API_KEY = "tl_sdk_suite"


@pytest.fixture(scope="module")
def mock():
    running = RunningMock("tensorlake", {"TENSORLAKE_API_KEY": API_KEY}, lines=3)
    saved = {k: os.environ.get(k) for k in _SDK_VARIABLES}
    os.environ["TENSORLAKE_API_KEY"] = API_KEY
    os.environ["TENSORLAKE_API_URL"] = running.vars["TENSORLAKE_API_URL"]
    os.environ["TENSORLAKE_SANDBOX_API_URL"] = running.vars["TENSORLAKE_SANDBOX_API_URL"]
    os.environ.pop("TENSORLAKE_SANDBOX_PROXY_URL", None)
    yield running
    running.stop()
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


_SDK_VARIABLES = (
    "TENSORLAKE_API_KEY",
    "TENSORLAKE_API_URL",
    "TENSORLAKE_SANDBOX_API_URL",
    "TENSORLAKE_SANDBOX_PROXY_URL",
)


def client(mock):
    """The lifecycle client, given the URL explicitly: the SDK's defaults
    were read from the environment when it was imported."""
    from tensorlake.sandbox.client import SandboxClient

    return SandboxClient(
        api_url=mock.vars["TENSORLAKE_API_URL"], api_key=API_KEY, _internal=True
    )


def create(mock, **kwargs):
    from tensorlake.sandbox import Sandbox

    return Sandbox.create(
        api_url=mock.vars["TENSORLAKE_API_URL"], api_key=API_KEY, **kwargs
    )


def connect(mock, identifier):
    from tensorlake.sandbox import Sandbox

    return Sandbox.connect(
        identifier, api_url=mock.vars["TENSORLAKE_API_URL"], api_key=API_KEY
    )


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def home(mock, sandbox):
    """The sandbox's directory on the host: where its paths must lie."""
    return mock.vars["TENSORLAKE_SANDBOX_ROOT"].replace("{id}", sandbox.sandbox_id)


def mock_control(mock, path, body):
    """POSTs to the mock's test-only control endpoint."""
    request = urllib.request.Request(
        mock.vars["TENSORLAKE_API_URL"] + path,
        data=json.dumps(body).encode(),
        headers={
            "Authorization": f"Bearer {API_KEY}",
            "Content-Type": "application/json",
        },
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.status


def eventually(condition, what, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


# --- create, get, list ---------------------------------------------------


def test_create_with_disk_and_a_name_runs_and_is_found_by_id_and_by_name(mock):
    name = unique("named")
    sandbox = create(mock, name=name, cpus=1, memory_mb=512, disk_mb=2048)
    try:
        assert sandbox.status.value == "running"
        by_id = client(mock).get(sandbox.sandbox_id).value
        assert by_id.name == name
        assert by_id.status.value == "running"
        assert by_id.resources.disk_mb == 2048
        by_name = client(mock).get(name).value
        assert by_name.sandbox_id == sandbox.sandbox_id
        attached = connect(mock, name)
        assert attached.sandbox_id == sandbox.sandbox_id
        assert attached.run("true").exit_code == 0
    finally:
        sandbox.terminate()


def test_create_without_disk_runs_with_the_default_disk(mock):
    sandbox = create(mock, cpus=1, memory_mb=512)
    try:
        info = client(mock).get(sandbox.sandbox_id).value
        assert info.status.value == "running"
        assert info.resources.disk_mb > 0
    finally:
        sandbox.terminate()


def test_auto_resume_is_echoed(mock):
    name = unique("noresume")
    sandbox = create(mock, name=name, auto_resume=False)
    try:
        assert client(mock).get(sandbox.sandbox_id).value.auto_resume is False
    finally:
        sandbox.terminate()
    other = create(mock, name=unique("resume"))
    try:
        assert client(mock).get(other.sandbox_id).value.auto_resume is True
    finally:
        other.terminate()


def test_a_reused_name_is_a_conflict(mock):
    from tensorlake.sandbox.exceptions import RemoteAPIError

    name = unique("taken")
    sandbox = create(mock, name=name)
    try:
        with pytest.raises(RemoteAPIError) as raised:
            client(mock).create(name=name)
        assert raised.value.status_code == 409
    finally:
        sandbox.terminate()


def test_listing_follows_the_cursor_past_one_page(mock):
    lifecycle = client(mock)
    made = [lifecycle.create(wait=False).sandbox_id for _ in range(105)]
    try:
        listed = {s.sandbox_id for s in lifecycle.list()}
        assert set(made) <= listed
    finally:
        for sandbox_id in made:
            lifecycle.delete(sandbox_id)


def test_delete_is_asynchronous_and_the_sandbox_ends(mock):
    lifecycle = client(mock)
    sandbox = create(mock)
    sandbox_id = sandbox.sandbox_id
    lifecycle.delete(sandbox_id)

    def gone_or_terminated():
        from tensorlake.sandbox.exceptions import SandboxNotFoundError

        try:
            return lifecycle.get(sandbox_id).value.status.value == "terminated"
        except SandboxNotFoundError:
            return True

    eventually(gone_or_terminated, "the deleted sandbox to end")


# --- processes -----------------------------------------------------------


@pytest.fixture(scope="module")
def sandbox(mock):
    sandbox = create(mock, name=unique("work"))
    yield sandbox
    sandbox.terminate()


def test_run_returns_output_and_exit_code(sandbox):
    result = sandbox.run("sh", ["-c", "echo out; echo err >&2; exit 3"])
    assert result.exit_code == 3
    assert result.stdout.strip() == "out"
    assert result.stderr.strip() == "err"


def test_an_unnamed_process_starts_and_its_output_is_read_and_followed(sandbox):
    started = sandbox.start_process("sh", ["-c", "echo one; echo two >&2"])
    pid = started.pid
    followed = [event.line for event in sandbox.follow_output(pid)]
    assert sorted(followed) == ["one", "two"]
    assert [e.line for e in sandbox.follow_stdout(pid)] == ["one"]
    assert [e.line for e in sandbox.follow_stderr(pid)] == ["two"]
    assert sandbox.get_stdout(pid).lines == ["one"]
    assert sandbox.get_stderr(pid).lines == ["two"]
    assert sorted(sandbox.get_output(pid).lines) == ["one", "two"]
    info = sandbox.get_process(pid)
    assert info.status.value == "exited"
    assert info.exit_code == 0
    assert info.started_at is not None


def test_a_named_process_is_managed_and_addressed_by_name(sandbox):
    name = unique("svc")
    started = sandbox.start_process("sleep", ["30"], name=name)
    assert started.managed is not None
    assert started.managed.name == name
    by_name = sandbox.get_process(name)
    assert by_name.pid == started.pid
    assert sandbox.send_signal(name, signal.SIGTERM).success
    eventually(
        lambda: sandbox.get_process(name).status.value != "running",
        "the signalled process to end",
    )
    ended = sandbox.get_process(name)
    assert ended.signal == signal.SIGTERM or ended.exit_code is not None


def test_listing_processes_shows_the_started_ones(sandbox):
    started = sandbox.start_process("true")
    assert started.pid in {p.pid for p in sandbox.list_processes()}


# --- files ---------------------------------------------------------------


def test_files_are_written_read_listed_and_deleted(mock, sandbox):
    directory = f"{home(mock, sandbox)}/files-{uuid.uuid4().hex[:6]}"
    sandbox.write_file(f"{directory}/a.txt", b"alpha")
    sandbox.write_file(f"{directory}/b.bin", b"\x00\x01\x02")
    assert bytes(sandbox.read_file(f"{directory}/a.txt").value) == b"alpha"
    listing = sandbox.list_directory(directory)
    entries = {e.name: e for e in listing.entries}
    assert set(entries) == {"a.txt", "b.bin"}
    assert entries["a.txt"].size == 5
    assert entries["a.txt"].is_dir is False
    sandbox.delete_file(f"{directory}/a.txt")
    assert {e.name for e in sandbox.list_directory(directory).entries} == {"b.bin"}


# --- PTY -----------------------------------------------------------------


def test_a_pty_session_echoes_input_and_reports_its_exit(sandbox):
    received = []
    exited = threading.Event()
    codes = []

    def on_exit(code):
        codes.append(code)
        exited.set()

    pty = sandbox.create_pty(
        "sh", on_data=lambda data: received.append(bytes(data)), on_exit=on_exit
    )
    try:
        pty.send_input("echo pty-$((40+2))\n")
        eventually(lambda: b"pty-42" in b"".join(received), "the PTY's echo")
        pty.send_input("exit 5\n")
        assert exited.wait(30), "the PTY never reported its exit"
        assert codes == [5]
    finally:
        pty.disconnect()


# --- network -------------------------------------------------------------


def test_the_network_policy_is_updated(sandbox):
    from tensorlake.sandbox.models import NetworkConfig

    updated = sandbox.update(
        network=NetworkConfig(allow_internet_access=False, allow_out=["10.0.0.1"])
    ).value
    assert updated.network_policy is not None
    assert updated.network_policy.allow_out == ["10.0.0.1"]


# --- suspend, resume, snapshot, restore ----------------------------------


def test_suspend_and_resume_answer_once_done(mock):
    name = unique("sleepy")
    sandbox = create(mock, name=name)
    try:
        started = sandbox.start_process("sleep", ["300"])
        lifecycle = client(mock)
        lifecycle.suspend(sandbox.sandbox_id)
        assert lifecycle.get(sandbox.sandbox_id).value.status.value == "suspended"
        lifecycle.resume(sandbox.sandbox_id)
        assert lifecycle.get(sandbox.sandbox_id).value.status.value == "running"
        assert sandbox.get_process(started.pid).status.value == "running"
    finally:
        sandbox.terminate()


def raw(mock, method, path):
    """A request as the SDK's Rust core sends it: (status, JSON body)."""
    request = urllib.request.Request(
        mock.vars["TENSORLAKE_SANDBOX_API_URL"] + path,
        headers={"Authorization": f"Bearer {API_KEY}", "Content-Length": "0"},
        method=method,
        data=b"" if method == "POST" else None,
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.status, json.loads(response.read() or b"null")


def test_suspend_and_resume_with_wait_ms_answer_once_done_and_without_at_once(mock):
    name = unique("waits")
    sandbox = create(mock, name=name)
    try:
        status, _ = raw(mock, "POST", f"/sandboxes/{name}/suspend?wait_ms=30000")
        assert status == 200
        assert client(mock).get(name).value.status.value == "suspended"
        status, _ = raw(mock, "POST", f"/sandboxes/{name}/resume?wait_ms=30000")
        assert status == 200
        assert client(mock).get(name).value.status.value == "running"
        # Without a wait the service accepts and goes on.
        status, _ = raw(mock, "POST", f"/sandboxes/{name}/suspend")
        assert status == 202
        eventually(
            lambda: client(mock).get(name).value.status.value == "suspended",
            "the suspend to finish",
        )
    finally:
        sandbox.terminate()


def test_a_snapshot_restores_the_files(mock):
    source = create(mock, name=unique("source"))
    try:
        path = f"{home(mock, source)}/kept.txt"
        source.write_file(path, b"kept")
        snapshot = source.checkpoint()
        assert snapshot.status.value in ("local_ready", "completed")
        info = client(mock).get_snapshot(snapshot.snapshot_id).value
        assert info.sandbox_id == source.sandbox_id
    finally:
        source.terminate()
    restored = create(mock, snapshot_id=snapshot.snapshot_id)
    try:
        moved = path.replace(source.sandbox_id, restored.sandbox_id)
        assert bytes(restored.read_file(moved).value) == b"kept"
    finally:
        restored.terminate()
        client(mock).delete_snapshot(snapshot.snapshot_id)


# --- the service's failure answers, on demand ----------------------------


def test_a_create_that_times_out_leaves_the_sandbox_pending_and_it_runs(mock):
    mock_control(mock, "/_mock/create_outcomes", {"timeout": {"pending_ms": 300}})
    sandbox = create(mock, name=unique("queued"))
    try:
        assert client(mock).get(sandbox.sandbox_id).value.status.value == "running"
        assert sandbox.run("true").exit_code == 0
    finally:
        sandbox.terminate()


def test_a_failed_start_is_an_error(mock):
    from tensorlake.sandbox.exceptions import SandboxError

    mock_control(mock, "/_mock/create_outcomes", "failed")
    with pytest.raises(SandboxError):
        create(mock, name=unique("doomed"))


def test_too_many_requests_with_retry_after_is_retried(mock, sandbox):
    mock_control(
        mock,
        "/_mock/faults",
        {
            "method": "GET",
            "path_prefix": f"/sandboxes/{sandbox.sandbox_id}",
            "status": 429,
            "times": 1,
            "retry_after_secs": 0,
        },
    )
    assert client(mock).get(sandbox.sandbox_id).value.status.value == "running"


def test_a_proxy_error_is_answered_as_the_service_does(mock, sandbox):
    from tensorlake.sandbox.exceptions import SandboxError

    mock_control(
        mock,
        "/_mock/faults",
        {
            "path_prefix": "/api/v1/files/list",
            "status": 400,
            "code": "SANDBOX_NOT_READY",
            "times": 1,
        },
    )
    with pytest.raises(SandboxError):
        sandbox.list_directory(home(mock, sandbox))
    assert sandbox.list_directory(home(mock, sandbox)).path == home(mock, sandbox)
