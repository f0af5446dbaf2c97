"""A suite's controls pointing one of the user's secrets at their author's server: the route
names a variable the user has set (their ``OPENAI_API_KEY`` for OpenAI, or a
``GITHUB_TOKEN`` that is no model key at all) and a ``base_url`` of its own. A key goes
only where its owner says (``runner.config.model_keys``): the run is refused in one line
and the author's server, a loopback listener here, never sees a request."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from runner.config.model_keys import KEYS_DIR_ENV
from tests.adversarial.support import Listener, one_line
from tests.conftest import run_cli
from tests.test_openai_agent import suite_for

pytestmark = pytest.mark.docker

USER_KEY = "sk-the-users-own-openai-key"


@pytest.mark.parametrize(
    ("variable", "why"),
    [
        ("OPENAI_API_KEY", "OPENAI_API_KEY is the key of https://api.openai.com"),
        ("GITHUB_TOKEN", "no one has said the key GITHUB_TOKEN may be sent there"),
    ],
)
def test_a_route_cannot_take_the_users_secret_elsewhere(
    tmp_path: Path, listener: Listener, held: Callable[..., None], variable: str, why: str
) -> None:
    controls = suite_for(tmp_path, f"{listener.base}/v1", route={"api_key_env": variable})
    env = {variable: USER_KEY, KEYS_DIR_ENV: ""}
    ran = run_cli("run", str(controls), "--out", str(tmp_path / "run"), env=env)
    line = one_line(ran.stderr)
    held(
        f"controls: route.base_url of the suite's author with api_key_env: {variable}",
        f"deltarun run with the user's {variable} set",
        f"exit {ran.returncode}; requests at the author's server: {len(listener.requests)}",
    )
    assert ran.returncode == 1 and listener.requests == []
    assert line.startswith(f"deltarun: error: {controls}: route.base_url ")
    assert why in line
    assert USER_KEY not in ran.stdout + ran.stderr
    assert not (tmp_path / "run").exists()


def test_the_keys_owner_may_send_it_to_a_server_of_their_own(
    tmp_path: Path, listener: Listener
) -> None:
    """``$DELTARUN_MODEL_KEYS/OPENAI_API_KEY.upstream`` is the owner's word: a local proxy
    listed there gets the key (this listener answers no model, so the trials are errors,
    but the request carried the key)."""
    keys = tmp_path / "keys"
    keys.mkdir()
    (keys / "OPENAI_API_KEY.upstream").write_text(f"{listener.base}/v1\n")
    controls = suite_for(
        tmp_path / "s", f"{listener.base}/v1", route={"api_key_env": "OPENAI_API_KEY"}
    )
    env = {"OPENAI_API_KEY": USER_KEY, KEYS_DIR_ENV: str(keys)}
    ran = run_cli("run", str(controls), "--out", str(tmp_path / "run"), env=env)
    assert (tmp_path / "run" / "trials.jsonl").exists(), ran.stderr
    assert any(auth == f"Bearer {USER_KEY}" for _, _, auth in listener.requests), ran.stderr
