"""Session images built by Garrison on Tensorlake, as the official SDK sees
them: `garrison image build NAME --backend tensorlake` against
`garrison mock tensorlake`, then the SDK's `find_sandbox_image_by_name` and
`list_sandbox_images` (its merged catalog of CAS and legacy images) must
find the image Garrison registered, in the shape the SDK documents.

The SDK's own builder cannot run against the mock: a CAS build runs on
Tensorlake's Image Service (remote BuildKit), and a legacy build needs the
platform's rootfs-build preparation and signed uploads, neither of which
the mock implements. So only the direction Garrison -> SDK is checked here.
"""

import os
import stat
import subprocess
import tempfile

import pytest

from conftest import RunningMock, garrison_bin

KEY = "tl_images_test_key_5e1f"


@pytest.fixture
def mock():
    running = RunningMock("tensorlake", {"TENSORLAKE_API_KEY": KEY}, lines=2)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def sdk_env(mock, monkeypatch):
    """The SDK reads its endpoint and key from the environment."""
    monkeypatch.setenv("TENSORLAKE_API_URL", mock.vars["TENSORLAKE_API_URL"])
    monkeypatch.setenv("TENSORLAKE_API_KEY", KEY)
    for name in ("TENSORLAKE_PAT", "TENSORLAKE_IMAGE_SERVICE_URL", "INDEXIFY_NAMESPACE"):
        monkeypatch.delenv(name, raising=False)


def garrison_image(mock, args, workdir, recipe=None):
    """Runs `garrison image ARGS` against the mock; its output."""
    fake_bin = os.path.join(workdir, "fake-bin")
    os.makedirs(fake_bin, exist_ok=True)
    apt = os.path.join(fake_bin, "apt-get")
    # The mock runs build steps on this machine: its apt-get only echoes.
    with open(apt, "w") as f:
        f.write('#!/bin/sh\necho "fake apt-get $*"\n')
    os.chmod(apt, stat.S_IRWXU)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": workdir,
        "TENSORLAKE_API_KEY": KEY,
        "TENSORLAKE_BUILD_PATH": f"{fake_bin}:/usr/bin:/bin",
        **mock.vars,
    }
    command = [garrison_bin(), "image", *args, "--state-dir", os.path.join(workdir, "state")]
    if recipe is not None:
        path = os.path.join(workdir, "recipe.toml")
        with open(path, "w") as f:
            f.write(recipe)
        command += ["--recipe", path]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


def test_the_sdk_finds_and_lists_an_image_garrison_built(mock, sdk_env):
    from tensorlake.image.sandbox_builder import (
        find_sandbox_image_by_name,
        list_sandbox_images,
    )

    with tempfile.TemporaryDirectory() as workdir:
        built = garrison_image(
            mock,
            ["build", "garrison-session", "--backend", "tensorlake"],
            workdir,
            recipe='packages = ["jq"]\nsteps = ["echo built > marker"]\n',
        )
        assert built.returncode == 0, built.stdout + built.stderr
        assert "built garrison-session on Tensorlake: image_" in built.stdout

        found = find_sandbox_image_by_name("garrison-session")
        assert found is not None
        assert found["name"] == "garrison-session"
        assert found["id"].startswith("image_")
        assert found["snapshot_format_version"] == "content_addressed_streaming_v1"
        assert found["snapshot_id"]
        assert found["id"] in built.stdout

        # The SDK looks a CAS name up in lowercase, as the registry stores it.
        assert find_sandbox_image_by_name("Garrison-Session")["id"] == found["id"]
        assert find_sandbox_image_by_name("no-such-image") is None

        listed = list_sandbox_images()
        assert [image["name"] for image in listed] == ["garrison-session"]
        assert listed[0]["id"] == found["id"]

        # Removed by Garrison: the SDK no longer sees it.
        removed = garrison_image(mock, ["rm", "garrison-session", "--backend", "tensorlake"], workdir)
        assert removed.returncode == 0, removed.stdout + removed.stderr
        assert find_sandbox_image_by_name("garrison-session") is None
        assert list_sandbox_images() == []


def test_garrison_lists_what_the_sdk_lists_and_the_sdk_deletes_what_garrison_built(
    mock, sdk_env
):
    from tensorlake.image.sandbox_builder import (
        delete_sandbox_image,
        list_sandbox_images,
    )

    with tempfile.TemporaryDirectory() as workdir:
        for name in ("team/base:v1", "team/app:v2"):
            built = garrison_image(
                mock, ["build", name, "--backend", "tensorlake"], workdir, recipe=""
            )
            assert built.returncode == 0, built.stdout + built.stderr
        sdk_names = sorted(image["name"] for image in list_sandbox_images())
        assert sdk_names == ["team/app:v2", "team/base:v1"]

        listed = garrison_image(mock, ["ls", "--backend", "tensorlake"], workdir)
        assert listed.returncode == 0, listed.stderr
        rows = [line.split()[0] for line in listed.stdout.splitlines()[1:]]
        assert rows == sdk_names

        # The SDK's delete goes through the same catalog.
        delete_sandbox_image("team/base:v1")
        listed = garrison_image(mock, ["ls", "--backend", "tensorlake"], workdir)
        assert [line.split()[0] for line in listed.stdout.splitlines()[1:]] == [
            "team/app:v2"
        ]
