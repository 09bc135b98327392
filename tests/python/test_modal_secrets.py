"""Modal Secrets through the official client (`modal`, the version
requirements.txt pins) against `garrison mock modal`.

`garrison deploy modal` gives the deployed serve its credentials as a named
Secret attached to its sandbox; these tests check the mock answers the
Secret calls as the official client makes them (`Secret.objects.create`,
`Secret.from_name`, `Secret.objects.list`, `Secret.update`,
`Secret.objects.delete`, `Secret.from_dict`) and that a sandbox created
with a Secret has its variables in its processes' environment while one
created without has not. Values are never read back from the API: only
names and keys are (as with Modal itself), values only inside a sandbox.
"""

import os
import uuid

import pytest

from conftest import RunningMock

TOKEN_ID = "ak-pytest-secrets"
TOKEN_SECRET = "as-pytest-secrets"
BASE_IMAGE = "im-mockbase"
_MODAL_ENV = ("MODAL_SERVER_URL", "MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET", "MODAL_CONFIG_PATH")


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
    """The `modal` package, configured by environment as a user would."""
    saved = {k: os.environ.get(k) for k in _MODAL_ENV}
    os.environ.update(
        {
            "MODAL_SERVER_URL": mock.vars["MODAL_SERVER_URL"],
            "MODAL_TOKEN_ID": TOKEN_ID,
            "MODAL_TOKEN_SECRET": TOKEN_SECRET,
            "MODAL_CONFIG_PATH": os.path.join(mock.root, "modal.toml"),
        }
    )
    import modal as modal_package

    # The client from the environment is a process-wide singleton: one made
    # for another module's mock (now stopped) must not be reused here, nor
    # this one there.
    modal_package.Client._set_env_client(None)
    yield modal_package
    modal_package.Client._set_env_client(None)
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_a_named_secret_is_created_found_listed_updated_and_deleted(modal):
    from modal.exception import AlreadyExistsError, NotFoundError

    name = unique("secret")
    modal.Secret.objects.create(name, {"API_KEY": "value-one", "OTHER": "x"})
    with pytest.raises(AlreadyExistsError):
        modal.Secret.objects.create(name, {"API_KEY": "value-two"})
    # allow_existing: a no-op on an existing Secret.
    modal.Secret.objects.create(name, {"API_KEY": "ignored"}, allow_existing=True)

    secret = modal.Secret.from_name(name)
    secret.hydrate()
    assert secret.object_id.startswith("st-")
    assert secret.info().name == name

    listed = {s.name: s.object_id for s in modal.Secret.objects.list()}
    assert listed.get(name) == secret.object_id

    # required_keys are checked by the server.
    modal.Secret.from_name(name, required_keys=["API_KEY"]).hydrate()
    with pytest.raises(NotFoundError):
        modal.Secret.from_name(name, required_keys=["MISSING"]).hydrate()

    secret.update({"THIRD": "3"})

    modal.Secret.objects.delete(name)
    with pytest.raises(NotFoundError):
        modal.Secret.from_name(name).hydrate()
    assert name not in {s.name for s in modal.Secret.objects.list()}


def test_an_invalid_secret_name_is_refused_by_the_client(modal):
    from modal.exception import InvalidError

    with pytest.raises(InvalidError):
        modal.Secret.objects.create("not a name", {"A": "1"})


def test_a_sandbox_gets_its_secrets_in_its_environment_and_another_does_not(modal):
    app = modal.App.lookup("garrison-pytest-secrets", create_if_missing=True)
    image = modal.Image.from_id(BASE_IMAGE)
    name = unique("sandbox-secret")
    modal.Secret.objects.create(name, {"GREETING": "hello-from-a-secret"})
    with_secrets = modal.Sandbox.create(
        "sleep",
        "infinity",
        app=app,
        image=image,
        timeout=600,
        secrets=[
            modal.Secret.from_name(name),
            modal.Secret.from_dict({"INLINE": "from-a-dict"}),
        ],
    )
    without = modal.Sandbox.create("sleep", "infinity", app=app, image=image, timeout=600)
    try:
        shown = with_secrets.exec("sh", "-c", 'echo "$GREETING $INLINE"')
        shown.wait()
        assert shown.stdout.read().strip() == "hello-from-a-secret from-a-dict"

        hidden = without.exec("sh", "-c", 'echo "[$GREETING$INLINE]"')
        hidden.wait()
        assert hidden.stdout.read().strip() == "[]"
    finally:
        with_secrets.terminate()
        without.terminate()
        modal.Secret.objects.delete(name)
