"""`network: model-only` end to end: a command agent calls the model through the trial's gateway.

The agent is examples/openai/agents/ask-model (it asks for a diff and applies it).
The model is tests/fake_openai.py served from a container on a network this
module creates, so every request goes container to container; the gateway's
egress network is that network (``runtime.model_network``).
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import leftover_networks, leftover_sandboxes, run_cli
from tests.helpers import ADD_GOLD, PY_IMAGE, make_suite, owned_key, repo_task

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[1]
KEY = "sk-model-only-5d1e"
DRIVER = """
import os
fake = FakeModel(
    lambda body, index: reply(content=os.environ["FAKE_DIFF"], model=os.environ["FAKE_MODEL"],
                              usage=(30, 12)),
    key=os.environ["FAKE_KEY"], host="0.0.0.0", port=8000,
)
fake.serve_forever()
"""


@pytest.fixture(scope="module")
def model_net(docker_api: Any, proxy_image: str) -> Iterator[str]:
    """A test network with two fake models: `fake-model` (the pinned name) and `fake-other`."""
    network = f"deltarun-test-mo-{uuid.uuid4().hex[:10]}"
    labels = {"deltarun.test": network}
    docker_api.create_network(network, driver="bridge", labels=labels)
    source = (ROOT / "tests" / "fake_openai.py").read_text() + DRIVER
    containers = []
    try:
        for alias, model in (("fake-model", "qwen-test"), ("fake-other", "other-model")):
            container = docker_api.create_container(
                PY_IMAGE,
                command=["python3", "-c", source],
                user="1000:1000",
                labels=labels,
                environment={"FAKE_DIFF": ADD_GOLD, "FAKE_MODEL": model, "FAKE_KEY": KEY},
                host_config=docker_api.create_host_config(
                    network_mode=network, read_only=True, cap_drop=["ALL"]
                ),
                networking_config=docker_api.create_networking_config(
                    {network: docker_api.create_endpoint_config(aliases=[alias])}
                ),
            )["Id"]
            containers.append(container)
            docker_api.start(container)
        time.sleep(1.0)  # python3 starts the server in well under a second
        yield network
    finally:
        for container in containers:
            docker_api.remove_container(container, force=True)
        docker_api.remove_network(network)


def suite(tmp_path: Path, network: str, host: str) -> Path:
    shutil.copytree(ROOT / "examples/openai/agents/ask-model", tmp_path / "agents/ask-model")
    return make_suite(
        tmp_path,
        [repo_task("t1"), repo_task("t2")],
        [
            {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
            {
                "name": "ask-model",
                "agent": {
                    "type": "command",
                    "dir": "agents/ask-model",
                    "argv": ["python3", "/opt/agent/run.py"],
                },
            },
        ],
        runtime={"network": "model-only", "model_network": network},
        route={
            "base_url": f"http://{host}:8000/v1",
            "model": "qwen-test",
            "api_key_env": "DELTARUN_MO_KEY",
        },
    )


def keyed(tmp_path: Path, host: str, key: str | None = KEY) -> dict[str, str]:
    """The run's environment: the key (unless None) and its owner's word that it may go to
    the fake model ``host`` (runner.config.model_keys)."""
    return owned_key(tmp_path / "keys", "DELTARUN_MO_KEY", f"http://{host}:8000", key=key)


def records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "trials.jsonl").read_text().splitlines()]


def test_command_agent_reaches_the_model_through_the_gateway(
    tmp_path: Path, docker_api: Any, model_net: str
) -> None:
    controls = suite(tmp_path, model_net, "fake-model")
    out = tmp_path / "run"
    result = run_cli("run", str(controls), "--out", str(out), env=keyed(tmp_path, "fake-model"))
    assert result.returncode == 0, result.stderr
    agent = [t for t in records(out) if t["arm"] == "ask-model"]
    assert [t["outcome"] for t in agent] == ["success", "success"], agent
    assert all((t["prompt_tokens"], t["completion_tokens"]) == (30, 12) for t in agent)
    for path in out.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path
    assert leftover_sandboxes(docker_api, owner=result.owner) == ([], [])
    assert leftover_networks(docker_api, owner=result.owner) == []


def test_another_model_behind_the_route_is_a_route_mismatch(
    tmp_path: Path, docker_api: Any, model_net: str
) -> None:
    controls = suite(tmp_path, model_net, "fake-other")
    out = tmp_path / "run"
    result = run_cli("run", str(controls), "--out", str(out), env=keyed(tmp_path, "fake-other"))
    assert result.returncode == 0, result.stderr
    agent = [t for t in records(out) if t["arm"] == "ask-model"]
    assert {t["outcome"] for t in agent} == {"error"}
    assert all(t["route_mismatch"] and "other-model" in t["error"] for t in agent)


def test_without_the_key_the_gateway_never_starts(
    tmp_path: Path, docker_api: Any, model_net: str
) -> None:
    controls = suite(tmp_path, model_net, "fake-model")
    result = run_cli(
        "run",
        str(controls),
        "--out",
        str(tmp_path / "run"),
        env=keyed(tmp_path, "fake-model", None),
    )
    assert result.returncode == 1 and "DELTARUN_MO_KEY" in result.stderr
    assert not (tmp_path / "run").exists()  # nothing written


PROBE = """
import json, os, socket, urllib.request, urllib.error
out = {}
try:
    socket.getaddrinfo("fake-model", 8000)
    out["resolve"] = "resolved"
except OSError as exc:
    out["resolve"] = type(exc).__name__
s = socket.socket()
s.settimeout(5)
try:
    s.connect((FAKE_IP, 8000))
    out["direct"] = "connected"
except OSError as exc:
    out["direct"] = type(exc).__name__
base = os.environ["DELTARUN_MODEL_BASE_URL"]
try:
    urllib.request.urlopen(base.rsplit("/v1", 1)[0] + "/admin", timeout=10)
    out["off_path"] = 200
except urllib.error.HTTPError as exc:
    out["off_path"] = exc.code
out["key_in_env"] = any(KEY in v for v in os.environ.values())
print("PROBE " + json.dumps(out))
"""


def test_the_sandbox_reaches_nothing_but_the_gateway(
    tmp_path: Path, docker_api: Any, model_net: str
) -> None:
    fake = docker_api.containers(filters={"label": f"deltarun.test={model_net}"})[0]
    ip = fake["NetworkSettings"]["Networks"][model_net]["IPAddress"]
    probe = tmp_path / "agents" / "probe"
    probe.mkdir(parents=True)
    (probe / "probe.py").write_text(f"FAKE_IP = {ip!r}\nKEY = {KEY!r}\n" + PROBE)
    controls = suite(tmp_path, model_net, "fake-model")
    text = (
        controls.read_text()
        .replace("agents/ask-model", "agents/probe")
        .replace("/opt/agent/run.py", "/opt/agent/probe.py")
    )
    controls.write_text(text)
    result = run_cli(
        "run", str(controls), "--out", str(tmp_path / "run"), env=keyed(tmp_path, "fake-model")
    )
    assert result.returncode == 0, result.stderr
    agent = [t for t in records(tmp_path / "run") if t["arm"] == "ask-model"]
    line = next(x for x in agent[0]["agent_log"].splitlines() if x.startswith("PROBE "))
    seen = json.loads(line.removeprefix("PROBE "))
    assert seen["resolve"] != "resolved" and seen["direct"] != "connected", seen
    assert seen["off_path"] == 403 and seen["key_in_env"] is False, seen


def test_a_missing_egress_network_is_one_line_before_anything_runs(
    tmp_path: Path, docker_api: Any, proxy_image: str
) -> None:
    controls = suite(tmp_path, f"deltarun-test-absent-{uuid.uuid4().hex[:8]}", "fake-model")
    result = run_cli(
        "run", str(controls), "--out", str(tmp_path / "run"), env=keyed(tmp_path, "fake-model")
    )
    assert result.returncode == 1, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "runtime.model_network" in lines[0], result.stderr
    assert not (tmp_path / "run").exists()
    assert leftover_sandboxes(docker_api, owner=result.owner) == ([], [])
