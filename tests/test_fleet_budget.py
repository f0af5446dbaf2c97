"""One budget for the run across the fleet (``budget.run_usd``): every gateway's spend is
debited to the run's account as answers arrive, and once it is spent every gateway refuses.

Real components: the Docker engine, the real proxy container of each trial, a scripted model
that bills 1 000 input and 500 output tokens an answer (``$0.002`` at the pinned price) in a
container on a network this module makes, command agents that ask it in a loop from
``network: model-only`` sandboxes, and for the fleet a real Redis with two real Celery
workers. Each trial alone would spend ``MAX_ASKS`` answers; the run's budget is
``BUDGET_ASKS`` answers; what the model billed must stop within the requests in flight (one
per agent running) of it, far less than a trial's spend. The agent, once refused, tries to
lift the refusal (the proxy's own paths, headers, Redis by any address it might know) and
asks again: still refused, nothing reached.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from runner.distributed import run_budget
from runner.store.rundir import RunDir
from tests.conftest import leftover_networks, leftover_sandboxes, run_cli
from tests.distributed_support import (
    RedisServer,
    run_on_two_workers,
)
from tests.helpers import PY_IMAGE, comparison, make_suite, owned_key, repo_task

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[1]
KEY = "sk-fleet-budget-3c9e"
UPSTREAM = "http://fake-model:8000"  # the route\'s server, which the key\'s owner names
PRICE = {"input": 1.0, "output": 2.0}  # per million: 1 000 in + 500 out = $0.002 an answer
PER_ASK_USD = 0.002
MAX_ASKS = 25  # what one trial asks when nothing stops it: $0.05
BUDGET_ASKS = 15  # the run's budget: $0.03
IN_FLIGHT_EACH = 3  # the request in flight, and those started before the word arrives
DRIVER = """
import os, sys, time
def answer(body, index):
    # A model takes its time, and the word reaches every gateway meanwhile: one relay
    # interval (0.2 s) and a copy into the gateway's volume, which on a loaded host
    # (the whole test suite on two cores) took well over the 0.4 s answers this once had.
    time.sleep(1.0)
    print("billed", flush=True)
    return reply(content="not yet", model="qwen-test", usage=(1000, 500))
FakeModel(answer, key=os.environ["FAKE_KEY"], host="0.0.0.0", port=8000).serve_forever()
"""
AGENT = """
import json, os, socket, urllib.error, urllib.request
BASE = os.environ["DELTARUN_MODEL_BASE_URL"]
BODY = {"model": os.environ["DELTARUN_MODEL"], "max_tokens": 500,
        "messages": [{"role": "user", "content": "go on"}]}

def ask(path="/chat/completions", method="POST", headers=None, url=None):
    request = urllib.request.Request(
        url or BASE + path, data=json.dumps(BODY).encode(), method=method,
        headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)

asks = 0
for _ in range(%(max_asks)d):
    status, text = ask()
    if status != 200:
        break
    asks += 1
probe = {"asks": asks, "refused": [status, text]}
if status != 200:
    root = BASE.rsplit("/v1", 1)[0]
    lifts = [
        ask(url=root + "/ledger/run-budget-spent", method="DELETE"),
        ask(url=root + "/__deltarun_run_state", method="POST"),
        ask(url=root + "/v1/../ledger/run-budget-spent", method="PUT"),
        ask(headers={"X-Deltarun-Run-Budget": "reset", "Authorization": "Bearer sk-x"}),
    ]
    probe["lifts"] = [code for code, _ in lifts]
    reached = []
    for host in ("model-gateway", "127.0.0.1"):  # the only names the sandbox resolves
        for port in (6379, %(redis_port)d):
            try:
                socket.create_connection((host, port), timeout=2).close()
                reached.append(f"{host}:{port}")
            except OSError:
                pass
    probe["redis_reached"] = reached
    probe["after"] = ask()
print("PROBE " + json.dumps(probe))
"""


@pytest.fixture
def billing_model(docker_api: Any, proxy_image: str) -> Iterator[tuple[str, str]]:
    """A network with the scripted model as ``fake-model``: (network, container)."""
    network = f"deltarun-test-fb-{uuid.uuid4().hex[:10]}"
    labels = {"deltarun.test": network}
    docker_api.create_network(network, driver="bridge", labels=labels)
    source = (ROOT / "tests" / "fake_openai.py").read_text() + DRIVER
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
        time.sleep(1.0)  # python3 starts the server in well under a second
        yield network, container
    finally:
        if container is not None:
            docker_api.remove_container(container, force=True)
        docker_api.remove_network(network)


def billed(docker_api: Any, container: str) -> int:
    """Answers the model billed (one ``billed`` line each, printed before it answers)."""
    return str(docker_api.logs(container, stdout=True, stderr=False).decode()).count("billed")


def budget_suite(root: Path, network: str, tasks: int, redis_port: int) -> Path:
    agent_dir = root / "agents" / "asker"
    agent_dir.mkdir(parents=True)
    script = AGENT % {"max_asks": MAX_ASKS, "redis_port": redis_port}
    (agent_dir / "run.py").write_text(script)
    agent = {"type": "command", "dir": "agents/asker", "argv": ["python3", "/opt/agent/run.py"]}
    controls = make_suite(
        root,
        [repo_task(f"t{i}", timeout_s=120) for i in range(tasks)],
        [
            {"name": "ctrl", "control": True, "agent": agent},
            {"name": "cand", "agent": agent},
        ],
        runtime={"network": "model-only", "model_network": network},
        route={
            "base_url": f"{UPSTREAM}/v1",
            "model": "qwen-test",
            "api_key_env": "DELTARUN_FB_KEY",
        },
    )
    data = yaml.safe_load(controls.read_text())
    data["prices"] = {"qwen-test": PRICE}
    data["budget"] = {"run_usd": BUDGET_ASKS * PER_ASK_USD}
    controls.write_text(yaml.safe_dump(data, sort_keys=False))
    return controls


def records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "trials.jsonl").read_text().splitlines()]


def probe_of(record: dict[str, Any]) -> dict[str, Any]:
    line = next(x for x in record["agent_log"].splitlines() if x.startswith("PROBE "))
    return dict(json.loads(line[len("PROBE ") :]))


def check_refused(trials: list[dict[str, Any]]) -> int:
    """Every trial the run's budget cut is the agent's miss, refused in the API's shape, and
    stays refused whatever the agent tries; how many were cut."""
    cut = [t for t in trials if t["stop_reason"] == "run_budget_exhausted"]
    assert cut, trials
    for trial in cut:
        assert trial["outcome"] == "miss" and trial["error"] is None, trial
        probe = probe_of(trial)
        status, text = probe["refused"]
        body = json.loads(text)
        assert status == 402 and body["error"]["code"] == "insufficient_quota", probe
        assert "the run's dollar budget is spent" in body["error"]["message"]
        assert all(code in (402, 403) for code in probe["lifts"]), probe
        assert probe["redis_reached"] == [], probe
        assert probe["after"][0] == 402, probe
        assert trial["cost_usd"] == pytest.approx(probe["asks"] * PER_ASK_USD)
    return len(cut)


def test_a_local_run_stops_at_the_run_budget_within_the_requests_in_flight(
    tmp_path: Path, docker_api: Any, billing_model: tuple[str, str]
) -> None:
    network, model = billing_model
    controls = budget_suite(tmp_path, network, tasks=4, redis_port=6379)
    out = tmp_path / "run"
    result = run_cli(
        "run",
        str(controls),
        "--out",
        str(out),
        "--parallel",
        "2",
        env=owned_key(tmp_path / "keys", "DELTARUN_FB_KEY", UPSTREAM, key=KEY),
    )
    assert result.returncode == 0, result.stderr
    asked = billed(docker_api, model)
    print(f"fleet budget: {asked} answers billed for a budget of {BUDGET_ASKS}")
    # Reached, and past it by no more than the two agents' requests in flight and those they
    # started before the word reached their gateway (1 s answers: at most two more each
    # while the word takes up to two seconds): never a trial's spend.
    assert BUDGET_ASKS <= asked <= BUDGET_ASKS + 2 * IN_FLIGHT_EACH, asked
    assert asked - BUDGET_ASKS < MAX_ASKS
    trials = records(out)
    assert len(trials) < 8  # no trial started once the budget was spent
    check_refused(trials)
    assert sum(t["cost_usd"] for t in trials) == pytest.approx(asked * PER_ASK_USD)
    assert "run budget" in result.stderr + result.stdout
    report = comparison(json.loads((out / "report.json").read_text()))
    assert report["cost"]["run_budget_reached"] is True
    text = (out / "report.md").read_text()
    assert "The run's budget ended the run" in text and "Spent per arm: ctrl $" in text
    ending = report["cost"]["run_budget_ending"]
    assert sum(ending["cut"].values()) == len(trials) and ending["text"] in text
    assert ending["text"].replace("'", "&#x27;") in (out / "report.html").read_text()
    assert leftover_sandboxes(docker_api, owner=result.owner) == ([], [])
    assert leftover_networks(docker_api, owner=result.owner) == []


def test_two_workers_share_one_run_budget(
    tmp_path: Path, docker_api: Any, redis_server: RedisServer, billing_model: tuple[str, str]
) -> None:
    network, model = billing_model
    controls = budget_suite(tmp_path, network, tasks=6, redis_port=redis_server.port)
    out = tmp_path / "run"
    procs = run_on_two_workers(
        redis_server,
        controls,
        out,
        owned_key(tmp_path / "keys", "DELTARUN_FB_KEY", UPSTREAM, key=KEY),
    )
    coordinator = procs[-1]
    asked = billed(docker_api, model)
    print(f"fleet budget: {asked} answers billed for a budget of {BUDGET_ASKS}")
    # Four agents at a time on two machines: past the budget by their requests in flight
    # (and those started before the word reached them), never by trials.
    assert BUDGET_ASKS <= asked <= BUDGET_ASKS + 4 * IN_FLIGHT_EACH, asked
    assert asked - BUDGET_ASKS < MAX_ASKS
    # Every answer billed was debited, once, to the arm that asked for it: the coordinator
    # says so, and the run's records (the trials in flight at the end included) agree.
    line = re.search(
        r"run budget spent across the fleet: \$([\d.]+) of \$0\.0300 \((.*?)\)", coordinator.text()
    )
    assert line is not None, coordinator.text()
    assert float(line[1]) == pytest.approx(asked * PER_ASK_USD)
    arms = {arm: float(usd) for arm, usd in re.findall(r"(\w+) \$([\d.]+)", line[2])}
    assert set(arms) <= {"ctrl", "cand"} and sum(arms.values()) == pytest.approx(float(line[1]))
    trials = records(out)
    check_refused(trials)
    for arm, usd in arms.items():
        assert sum(t["cost_usd"] for t in trials if t["arm"] == arm) == pytest.approx(usd)
    assert "run budget $0.03 reached" in coordinator.text()
    # The account went with the run's other keys.
    run_id = RunDir(out).meta().run_id
    assert not redis_server.client().exists(run_budget.account_key(run_id))
    skipped = "".join(p.text() for p in procs[:2])
    assert "run stopped (run budget spent)" in skipped  # queued jobs never started
