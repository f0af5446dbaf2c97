"""Where a worker finds a route's provider key (runner.config.model_keys): its environment,
else a file of that name in ``$DELTARUN_MODEL_KEYS`` (how compose.yaml gives workers their
keys, docs/many-machines.md); a missing key is one line saying where it was looked for,
before a local run starts and when a worker's gateway starts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runner.config.arms import Route
from runner.config.controls import Controls
from runner.config.model_keys import KEYS_DIR_ENV, PROVIDER_UPSTREAMS, model_key
from runner.errors import SandboxError, UserError
from runner.run import plan_checks as checks
from runner.sandbox.base import ModelAccess
from runner.sandbox.gateway_container import open_gateway
from tests.helpers import owned_key

PATH = Path("controls.yaml")


def keyed() -> Controls:
    return Controls.model_validate(
        {
            "protocol_id": "t",
            "channel": "exploratory",
            "suite": {"file": "suite/tasks.jsonl", "sha256": "a" * 64},
            "route": {"base_url": "http://127.0.0.1:9/v1", "model": "m", "api_key_env": "MY_KEY"},
            "arms": [
                {"name": "c", "control": True, "agent": {"type": "scripted", "action": "noop"}},
                {"name": "m", "agent": {"type": "openai"}},
            ],
        }
    )


UPSTREAM = "http://127.0.0.1:9/v1"  # keyed()'s route


def test_the_environment_first_then_the_key_directory(tmp_path: Path) -> None:
    (tmp_path / "MY_KEY").write_text("sk-from-file\n")
    with_dir = owned_key(tmp_path, "MY_KEY", UPSTREAM)
    assert model_key("MY_KEY", UPSTREAM, {"MY_KEY": "sk-from-env", **with_dir}) == "sk-from-env"
    assert model_key("MY_KEY", UPSTREAM, with_dir) == "sk-from-file"  # one newline dropped
    owned_key(tmp_path, "OTHER_KEY", UPSTREAM)
    assert model_key("OTHER_KEY", UPSTREAM, with_dir) is None
    checks.check_keys(PATH, keyed(), with_dir)  # a local run finds it there too


def test_a_missing_key_says_where_it_was_looked_for(tmp_path: Path) -> None:
    owner = owned_key(tmp_path, "MY_KEY", UPSTREAM)
    with pytest.raises(
        UserError, match=r"route\.api_key_env: environment variable MY_KEY is "
    ) as e:
        checks.check_keys(PATH, keyed(), owner)
    assert f"{tmp_path}/MY_KEY does not exist" in str(e.value)
    # A provider's key bound for its provider needs no directory: said without one too.
    to_openai = keyed().model_copy(
        update={
            "route": Route(
                base_url="https://api.openai.com/v1", model="m", api_key_env="OPENAI_API_KEY"
            )
        }
    )
    with pytest.raises(UserError, match=r"OPENAI_API_KEY is not set \(nor DELTARUN_MODEL_KEYS"):
        checks.check_keys(PATH, to_openai, {})


@pytest.mark.parametrize(
    "content",
    [b"", b"\n", b"sk-one\nsk-two\n", b"sk-\0x", b"x" * (17 << 10)],
    ids=["empty", "newline", "two-lines", "nul", "too-large"],
)
def test_a_key_file_that_is_not_one_key_is_one_line(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "MY_KEY").write_bytes(content)
    with pytest.raises(UserError) as refused:
        model_key("MY_KEY", UPSTREAM, owned_key(tmp_path, "MY_KEY", UPSTREAM))
    message = str(refused.value)
    assert str(tmp_path / "MY_KEY") in message and "\n" not in message
    assert "sk-one" not in message  # a refusal never quotes the key


def test_a_key_name_is_never_a_path(tmp_path: Path) -> None:
    # route.api_key_env's pattern refuses these in controls; the lookup refuses them too.
    secret = tmp_path / "outside"
    secret.write_text("not-a-key\n")
    keys = tmp_path / "keys"
    keys.mkdir()
    for name in ("../outside", str(secret), "a/b"):
        assert model_key(name, UPSTREAM, {KEYS_DIR_ENV: str(keys)}) is None


def test_a_fifo_in_the_key_directory_is_refused_not_waited_on(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "MY_KEY")
    with pytest.raises(UserError, match="MY_KEY"):
        model_key("MY_KEY", UPSTREAM, owned_key(tmp_path, "MY_KEY", UPSTREAM))


def test_a_key_bound_to_its_upstream_goes_nowhere_else(tmp_path: Path) -> None:
    # Whoever holds the job key writes the routes workers follow; a worker's key file may
    # name the only upstreams its key is sent to, so a route to another host gets no key.
    (tmp_path / "MY_KEY").write_text("sk-bound\n")
    (tmp_path / "MY_KEY.upstream").write_text("https://api.example.com/\n")
    env = {KEYS_DIR_ENV: str(tmp_path)}
    assert model_key("MY_KEY", "https://api.example.com/v1", env) == "sk-bound"
    assert model_key("MY_KEY", "https://api.example.com", env) == "sk-bound"
    for elsewhere in (
        "https://api.example.com.attacker.test/v1",
        "http://api.example.com/v1",
        "https://attacker.test/v1",
    ):
        with pytest.raises(UserError, match="is not an upstream the key MY_KEY may be sent to"):
            model_key("MY_KEY", elsewhere, env)
        # the binding holds for a key in the environment too
        with pytest.raises(UserError, match=r"MY_KEY\.upstream"):
            model_key("MY_KEY", elsewhere, {**env, "MY_KEY": "sk-env"})
    with pytest.raises(UserError, match=r"MY_KEY\.upstream"):  # before a local run starts
        checks.check_keys(PATH, keyed(), env)  # its route is http://127.0.0.1:9/v1


def test_a_worker_gateway_refuses_to_send_a_bound_key_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "MY_KEY").write_text("sk-bound\n")
    (tmp_path / "MY_KEY.upstream").write_text("https://api.example.com\n")
    monkeypatch.setenv(KEYS_DIR_ENV, str(tmp_path))
    access = ModelAccess("https://attacker.test/v1", "MY_KEY", "bridge")
    with pytest.raises(SandboxError, match="not an upstream the key MY_KEY") as refused:
        open_gateway(None, access, {}, "w1")  # refused before any container is made
    assert "sk-bound" not in str(refused.value)


def test_a_providers_own_key_goes_only_to_its_provider(tmp_path: Path) -> None:
    """Controls come with a suite: a route naming the user's ``OPENAI_API_KEY`` and a server
    of its author's gets no key, unless the key's owner listed that server."""
    env = {"OPENAI_API_KEY": "sk-openai"}
    assert model_key("OPENAI_API_KEY", "https://api.openai.com/v1", env) == "sk-openai"
    for elsewhere in (
        "https://api.openai.com.attacker.test/v1",
        "http://api.openai.com/v1",
        "https://api.openai.com:8443/v1",
        "http://127.0.0.1:9/v1",
    ):
        with pytest.raises(UserError, match=r"OPENAI_API_KEY is the key of https://api\.openai"):
            model_key("OPENAI_API_KEY", elsewhere, env)
        with pytest.raises(UserError, match="OPENAI_API_KEY is the key"):  # a key file alike
            model_key("OPENAI_API_KEY", elsewhere, {KEYS_DIR_ENV: str(tmp_path)})
    # The owner's list, where there is one, is the owner's word: a local proxy.
    (tmp_path / "OPENAI_API_KEY.upstream").write_text("http://127.0.0.1:8000/v1\n")
    listed = {**env, KEYS_DIR_ENV: str(tmp_path)}
    assert model_key("OPENAI_API_KEY", "http://127.0.0.1:8000/v1", listed) == "sk-openai"
    with pytest.raises(UserError, match=r"OPENAI_API_KEY\.upstream"):
        model_key("OPENAI_API_KEY", "https://api.openai.com/v1", listed)
    # Every provider's API is named by https and a host, nothing a route could stretch.
    for bases in PROVIDER_UPSTREAMS.values():
        assert all(b.startswith("https://") and not b.endswith("/") for b in bases)


@pytest.mark.parametrize("name", ["MY_KEY", "GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "HOME"])
def test_any_other_variable_goes_only_where_its_owner_said(tmp_path: Path, name: str) -> None:
    """A route may name any variable of the environment it runs in, not only a model key:
    one that is no provider's goes nowhere until its owner lists the upstream."""
    env = {name: "secret-value"}
    with pytest.raises(UserError, match=rf"no one has said the key {name} may be sent") as e:
        model_key(name, "http://127.0.0.1:9/v1", env)
    assert "secret-value" not in str(e.value)
    assert f"{name}.upstream in a directory of yours named by ${KEYS_DIR_ENV}" in str(e.value)
    with pytest.raises(UserError, match=rf"of the file {tmp_path}/{name}\.upstream$"):
        model_key(name, "http://127.0.0.1:9/v1", {**env, KEYS_DIR_ENV: str(tmp_path)})
    owner = {**env, **owned_key(tmp_path, name, "http://127.0.0.1:9")}
    assert model_key(name, "http://127.0.0.1:9/v1", owner) == "secret-value"
    with pytest.raises(UserError, match="is not an upstream the key"):
        model_key(name, "http://127.0.0.1:10/v1", owner)
