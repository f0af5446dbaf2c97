"""Shared rate limits end to end on the real engine: each trial's real proxy container takes
its permits through the engine from its relay (``put_archive``), and the trials of a run,
locally and on two Celery workers sharing a real Redis, keep a scripted model under its rate.

The model (in a container on a network this module makes) allows 4 requests a second and
answers 429 with ``Retry-After: 1`` past it; ``rate_limits`` gives the route that rate. Four
command agents at a time each ask it 12 times in a row, as fast as they are answered.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import run_cli
from tests.distributed_support import (
    RedisServer,
    run_on_two_workers,
)
from tests.helpers import PY_IMAGE, make_suite, owned_key, repo_task

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[1]
KEY = "sk-rate-limits-77a1"
UPSTREAM = "http://fake-model:8000"  # the route\'s server, which the key\'s owner names
RATE = 4  # a second
ASKS = 12
DRIVER = """
import os, threading, time
lock = threading.Lock()
bucket = {"tokens": %(rate)d * 1.0, "at": time.monotonic()}
def answer(body, index):
    with lock:
        now = time.monotonic()
        bucket["tokens"] = min(%(rate)d.0, bucket["tokens"] + (now - bucket["at"]) * %(rate)d)
        bucket["at"] = now
        if bucket["tokens"] < 1:
            print("refused", flush=True)
            return error(429, "rate limit reached", retry_after="1")
        bucket["tokens"] -= 1
    print("answered", flush=True)
    return reply(content="more", model="qwen-test", usage=(100, 10))
FakeModel(answer, key=os.environ["FAKE_KEY"], host="0.0.0.0", port=8000).serve_forever()
"""
AGENT = """
import json, os, urllib.error, urllib.request
BODY = json.dumps({"model": os.environ["DELTARUN_MODEL"],
                   "messages": [{"role": "user", "content": "go on"}]}).encode()
def lift(path, method):  # the agent tries to give itself permits: only the model API passes
    root = os.environ["DELTARUN_MODEL_BASE_URL"].rsplit("/v1", 1)[0]
    request = urllib.request.Request(root + path, data=b"999999", method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code
print("LIFTS " + json.dumps([lift("/ledger/rate-permits", "PUT"), lift("/rate-permits", "POST"),
                             lift("/v1/../ledger/rate-permits", "PUT")]))
codes = []
for _ in range(%(asks)d):
    request = urllib.request.Request(os.environ["DELTARUN_MODEL_BASE_URL"] + "/chat/completions",
                                     data=BODY, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            codes.append(answer.status)
    except urllib.error.HTTPError as exc:
        codes.append(exc.code)
print("CODES " + json.dumps(codes))
"""


@pytest.fixture
def limited_model(docker_api: Any, proxy_image: str) -> Iterator[tuple[str, str]]:
    network = f"deltarun-test-rl-{uuid.uuid4().hex[:10]}"
    labels = {"deltarun.test": network}
    docker_api.create_network(network, driver="bridge", labels=labels)
    source = (ROOT / "tests" / "fake_openai.py").read_text() + DRIVER % {"rate": RATE}
    container = None
    try:
        container = docker_api.create_container(
            PY_IMAGE,
            command=["python3", "-u", "-c", source],
            user="1000:1000",
            labels=labels,
            environment={"FAKE_KEY": KEY},
            host_config=docker_api.create_host_config(
                network_mode=network, read_only=True, cap_drop=["ALL"]
            ),
            networking_config=docker_api.create_networking_config(
                {network: docker_api.create_endpoint_config(aliases=["fake-model"])}
            ),
        )["Id"]
        docker_api.start(container)
        time.sleep(1.0)
        yield network, container
    finally:
        if container is not None:
            docker_api.remove_container(container, force=True)
        docker_api.remove_network(network)


def limited_suite(root: Path, network: str, tasks: int) -> Path:
    agent_dir = root / "agents" / "asker"
    agent_dir.mkdir(parents=True)
    (agent_dir / "run.py").write_text(AGENT % {"asks": ASKS})
    agent = {"type": "command", "dir": "agents/asker", "argv": ["python3", "/opt/agent/run.py"]}
    controls = make_suite(
        root,
        [repo_task(f"t{i}", timeout_s=120) for i in range(tasks)],
        [{"name": "ctrl", "control": True, "agent": agent}, {"name": "cand", "agent": agent}],
        runtime={"network": "model-only", "model_network": network},
        route={
            "base_url": f"{UPSTREAM}/v1",
            "model": "qwen-test",
            "api_key_env": "DELTARUN_RL_KEY",
        },
    )
    data = yaml.safe_load(controls.read_text())
    data["rate_limits"] = {"qwen-test": {"requests_per_minute": RATE * 60}}
    controls.write_text(yaml.safe_dump(data, sort_keys=False))
    return controls


def counts(docker_api: Any, container: str) -> tuple[int, int]:
    text = docker_api.logs(container, stdout=True, stderr=False).decode()
    return text.count("answered"), text.count("refused")


def check(out: Path, answered: int, refused: int, trials: int) -> None:
    lines = [json.loads(x) for x in (out / "trials.jsonl").read_text().splitlines()]
    assert len(lines) == trials and all(t["error"] is None for t in lines), lines
    for trial in lines:
        codes = next(x for x in trial["agent_log"].splitlines() if x.startswith("CODES "))
        assert json.loads(codes[6:]) == [200] * ASKS, codes  # a 429 never reached an agent
        lifts = next(x for x in trial["agent_log"].splitlines() if x.startswith("LIFTS "))
        assert json.loads(lifts[6:]) == [403, 403, 403], lifts
    assert answered == trials * ASKS
    assert refused <= 0.05 * (answered + refused), (answered, refused)


def test_a_local_run_keeps_the_route_under_its_rate(
    tmp_path: Path, docker_api: Any, limited_model: tuple[str, str]
) -> None:
    network, model = limited_model
    controls = limited_suite(tmp_path, network, tasks=2)
    out = tmp_path / "run"
    result = run_cli(
        "run",
        str(controls),
        "--out",
        str(out),
        "--parallel",
        "4",
        env=owned_key(tmp_path / "keys", "DELTARUN_RL_KEY", UPSTREAM, key=KEY),
    )
    assert result.returncode == 0, result.stderr
    answered, refused = counts(docker_api, model)
    print(f"rate limits (local): {answered} answered, {refused} refused")
    check(out, answered, refused, trials=4)


def test_two_workers_share_the_routes_rate(
    tmp_path: Path, docker_api: Any, redis_server: RedisServer, limited_model: tuple[str, str]
) -> None:
    network, model = limited_model
    controls = limited_suite(tmp_path, network, tasks=2)
    out = tmp_path / "run"
    run_on_two_workers(
        redis_server,
        controls,
        out,
        owned_key(tmp_path / "keys", "DELTARUN_RL_KEY", UPSTREAM, key=KEY),
    )
    answered, refused = counts(docker_api, model)
    print(f"rate limits (two workers): {answered} answered, {refused} refused")
    check(out, answered, refused, trials=4)
    workers = {json.loads(x)["worker"] for x in (out / "trials.jsonl").read_text().splitlines()}
    assert workers == {"w1", "w2"}  # the route's rate held across machines
