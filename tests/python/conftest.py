"""Shared fixtures for the suites in which the official service clients
(Modal's `modal`, Tensorlake's `tensorlake`, pinned in requirements.txt)
drive Garrison's mocks.

The mocks run as `garrison mock SERVICE` processes on loopback, exactly as a
user would start them; `GARRISON_BIN` names the binary (scripts/test sets it
to the release build).
"""

import os
import shutil
import subprocess
import tempfile

import pytest


def garrison_bin():
    path = os.environ.get("GARRISON_BIN") or shutil.which("garrison")
    if not path:
        pytest.fail("set GARRISON_BIN to the garrison binary (scripts/test does)")
    return path


class RunningMock:
    """A `garrison mock SERVICE` child process and the variables it printed."""

    def __init__(self, service, env, lines, extra_args=()):
        self.root = tempfile.mkdtemp(prefix=f"garrison-mock-{service}-")
        self.proc = subprocess.Popen(
            [garrison_bin(), "mock", service, "--root", self.root, *extra_args],
            env={**os.environ, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # The mock prints its variables (NAME=value, one a line) first.
        self.vars = {}
        for _ in range(lines):
            line = self.proc.stdout.readline()
            if not line:
                err = self.proc.stderr.read()
                raise RuntimeError(f"garrison mock {service} exited early: {err}")
            name, _, value = line.strip().partition("=")
            self.vars[name] = value

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)
