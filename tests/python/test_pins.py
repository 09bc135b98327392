"""The clients the mock suites run are the versions requirements.txt pins
(and the README names): a stale virtualenv must not judge the mocks."""

from importlib.metadata import version
from pathlib import Path


def pinned(name):
    for line in (Path(__file__).parent / "requirements.txt").read_text().splitlines():
        if line.lower().startswith(name + "=="):
            return line.split("==", 1)[1]
    raise AssertionError(f"{name} is not pinned in requirements.txt")


def test_modal_is_the_pinned_version():
    assert version("modal") == pinned("modal")


def test_tensorlake_is_the_pinned_version():
    assert version("tensorlake") == pinned("tensorlake")
