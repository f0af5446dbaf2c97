"""The run's budget, part by part: the proxy's refusal once the harness says the run's budget
is spent (the real proxy.py as a process against a fake upstream on 127.0.0.1), the run's
account behind one interface in Redis (a real server) and in this process, and the report's
budget line. End to end on Docker and Celery workers: tests/test_fleet_budget.py.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from runner.config.controls import Price
from runner.config.loader import parse_controls
from runner.distributed import keys, run_budget
from runner.gateway.budget import RUN_SPENT_FILE
from runner.records import Outcome
from runner.report.cost import cost_json, cost_markdown, cost_table
from runner.sandbox.gateway_container import Exchange
from runner.sandbox.gateway_relay import MICROS, LocalAccounts, RunAccount, micros_of
from tests.distributed_support import RedisServer
from tests.proxy_answers import ANTHROPIC_JSON, CHAT_JSON
from tests.proxy_support import REAL_KEY, Answer, FakeUpstream, proxy_environment, proxy_running
from tests.test_scoring import trial

REQUEST = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
ANTHROPIC = {"anthropic-version": "2023-06-01", "x-api-key": "placeholder"}


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    fake = FakeUpstream()
    yield fake
    fake.close()


def test_once_the_run_is_spent_the_proxy_refuses_in_each_apis_shape(
    upstream: FakeUpstream,
) -> None:
    env = proxy_environment(upstream.url, REAL_KEY)
    with proxy_running(env) as proxy:
        upstream.answer = Answer(json.dumps(CHAT_JSON).encode())
        assert proxy.ask("/v1/chat/completions", REQUEST).status == 200
        (Path(env["DELTARUN_LEDGER"]) / RUN_SPENT_FILE).write_text("spent\n")
        before = len(upstream.seen)
        shapes = {}
        for path in ("/v1/chat/completions", "/v1/responses", "/v1/messages"):
            reply = proxy.ask(path, REQUEST, ANTHROPIC if "messages" in path else {})
            assert reply.headers["x-should-retry"] == "false"
            assert Exchange.parse(reply.log_line) == Exchange(
                path, reply.status, None, 0, 0, budget_exhausted=True, flags=("run_budget",)
            )
            shapes[path] = (reply.status, reply.json())
        assert len(upstream.seen) == before, "a request past the run's budget was forwarded"
    chat, responses, messages = shapes.values()
    assert chat[0] == 402 and chat[1]["error"]["code"] == "insufficient_quota"
    assert responses[0] == 400 and responses[1]["error"]["code"] == "insufficient_quota"
    assert messages[0] == 400 and messages[1]["error"]["type"] == "invalid_request_error"
    text = json.dumps([chat, responses, messages])
    assert text.count("the run's dollar budget is spent") == 3
    assert "rate" not in text.lower()  # litellm would retry a rate limit


def test_a_refusal_of_an_anthropic_request_is_its_own_shape(upstream: FakeUpstream) -> None:
    env = proxy_environment(upstream.url, REAL_KEY)
    (Path(env["DELTARUN_LEDGER"]) / RUN_SPENT_FILE).write_text("spent\n")
    with proxy_running(env) as proxy:
        upstream.answer = Answer(json.dumps(ANTHROPIC_JSON).encode())
        reply = proxy.ask("/v1/messages", REQUEST, ANTHROPIC)
        assert reply.json()["type"] == "error" and not upstream.seen


def test_micro_dollars_price_cached_tokens_as_the_record_does() -> None:
    price = Price(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)
    # 111 000 input of which 100 000 read and 10 000 written from the cache, 2 000 output
    assert micros_of(price, (111_000, 2000, 100_000, 10_000)) == 3000 + 30000 + 30000 + 37500
    assert micros_of(Price(input=1.0, output=2.0), (1000, 500, 0, 0)) == 2000


def accounts(kind: str, server: RedisServer | None) -> Any:
    if kind == "redis":
        assert server is not None
        return run_budget.RedisAccounts(server.client())
    return LocalAccounts()


@pytest.mark.parametrize("kind", ["local", "redis"])
def test_two_gateways_racing_cross_the_run_budget_once(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    server = request.getfixturevalue("redis_server") if kind == "redis" else None
    where = accounts(kind, server)
    # Two machines' relays, each with its own handle on the run's account.
    first: RunAccount = where.account("run-1", 0.01)
    second: RunAccount = accounts(kind, server).account("run-1", 0.01) if server else first
    crossings: list[bool] = []

    def spend(account: RunAccount, arm: str) -> None:
        for _ in range(50):
            crossings.append(account.debit(arm, 100))

    threads = [
        threading.Thread(target=spend, args=(first, "ctrl")),
        threading.Thread(target=spend, args=(second, "cand")),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert first.spent() and second.spent()
    assert crossings.count(False) == 99  # the hundredth debit (10 000 micro-dollars) crossed
    if server is not None:
        figures = run_budget.figures(server.client(), "run-1")
        assert figures == {
            "limit_usd": 0.01,
            "spent_usd": 0.01,
            "reached": True,
            "arms": {"ctrl": 0.005, "cand": 0.005},
        }
        stop = server.client().get(keys.stopped("run-1"))
        assert stop == run_budget.REASON.encode()  # workers skip the run's queued jobs
        assert server.client().ttl(run_budget.account_key("run-1")) > 0
        other = run_budget.RedisAccounts(server.client()).account("run-2", 0.01)
        assert not other.spent()  # one run's budget is not another's


def test_a_resumed_run_starts_from_what_its_records_spent(redis_server: RedisServer) -> None:
    client = redis_server.client()
    run_budget.open_account(client, "run-r", 1.0, 0.75)
    account = run_budget.RedisAccounts(client).account("run-r", 1.0)
    assert not account.spent()
    assert account.debit("cand", round(0.25 * MICROS))
    local = LocalAccounts()
    local.open("run-r", 1.0, 0.75)
    assert not local.spent("run-r")
    assert local.account("run-r", 1.0).debit("cand", round(0.25 * MICROS))
    assert local.spent("run-r")


def test_the_report_says_how_the_budget_ended_the_run() -> None:
    data = {
        "protocol_id": "p",
        "suite": {"file": "tasks.jsonl"},
        "runtime": {"network": "model-only"},
        "route": {"base_url": "http://127.0.0.1:9/v1", "model": "m-1"},
        "prices": {"m-1": {"input": 1, "output": 2}},
        "budget": {"run_usd": 0.05},
        "arms": [
            {
                "name": "ctrl",
                "control": True,
                "agent": {"type": "command", "dir": "a", "argv": ["x"]},
            },
            {"name": "cand", "agent": {"type": "command", "dir": "a", "argv": ["x"]}},
        ],
    }
    controls = parse_controls(yaml.safe_dump(data), "controls.yaml")
    cut = {"stop_reason": "run_budget_exhausted"}
    trials = [
        trial("t1", "ctrl", Outcome.MISS, cost_usd=0.02),
        trial("t1", "cand", Outcome.SUCCESS, cost_usd=0.01),
        trial("t2", "ctrl", Outcome.MISS, cost_usd=0.015, **cut),
        trial("t2", "cand", Outcome.MISS, cost_usd=0.004, **cut),
        trial("t3", "ctrl", Outcome.MISS, cost_usd=0.004, **cut),
    ]
    table = cost_table(controls, ["ctrl", "cand"], trials)
    assert table is not None and table.budget_reached
    text = "\n".join(cost_markdown(table))
    assert "Spent per arm: ctrl $0.0390, cand $0.0140." in text
    assert (
        "cut short (each the agent's miss, stop reason `run_budget_exhausted`): ctrl 2, cand 1"
        in text
    )
    assert "share 2 task(s) with a record from each" in text
    assert "1 task(s) with records from some arms only are not paired" in text
    assert cost_json(table)["run_budget_reached"] is True
    ending = cost_json(table)["run_budget_ending"]
    assert ending["cut"] == {"ctrl": 2, "cand": 1}
    assert (ending["paired_tasks"], ending["unpaired_tasks"]) == (2, 1)
    # A run the budget did not end says nothing of it.
    calm = cost_table(controls, ["ctrl", "cand"], trials[:2])
    assert calm is not None and "ended the run" not in "\n".join(cost_markdown(calm))
    assert "run_budget_ending" not in cost_json(calm)  # other reports keep their bytes


def test_a_run_budget_without_the_models_price_is_one_line() -> None:
    data = {
        "protocol_id": "p",
        "suite": {"file": "tasks.jsonl"},
        "runtime": {"network": "model-only"},
        "route": {"base_url": "http://127.0.0.1:9/v1", "model": "m-1"},
        "budget": {"run_usd": 1.0},
        "arms": [
            {"name": "c", "control": True, "agent": {"type": "command", "dir": "a", "argv": ["x"]}}
        ],
    }
    with pytest.raises(Exception, match=r"budget.run_usd needs prices.m-1"):
        parse_controls(yaml.safe_dump(data), "controls.yaml")


class Reached(Exception):
    """Stands for the recording's "run budget reached"."""


def test_a_spent_budget_records_the_trials_in_flight_before_it_stops() -> None:
    from runner.executors.local import run_local

    jobs = [trial(f"t{i}", "cand", Outcome.MISS) for i in range(6)]
    started: list[str] = []
    recorded: list[str] = []
    spent = threading.Event()
    gate = threading.Barrier(2)

    def run_one(job: Any) -> Any:
        started.append(job.task_id)
        gate.wait(timeout=10)  # two at a time: both in flight when the budget is spent
        spent.set()
        return job

    def record(done: Any) -> None:
        recorded.append(done.task_id)
        raise Reached()  # every record past the budget says so

    with pytest.raises(Reached):
        run_local(
            jobs, run_one, record, parallel=2, on_interrupt=lambda: None, stopped=spent.is_set
        )
    assert sorted(recorded) == sorted(started) == ["t0", "t1"]  # both kept, none started after

    def failing(done: Any) -> None:
        raise OSError("disk full")  # a record not written is raised at once, never passed over

    spent.clear()
    with pytest.raises(OSError):
        run_local(
            jobs, run_one, failing, parallel=2, on_interrupt=lambda: None, stopped=spent.is_set
        )


def test_a_resumed_fleet_run_keeps_its_account_and_a_spent_run_stays_stopped(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    from runner.config.controls import Budget
    from tests.test_run_service import job_of, prepared_run, record

    prepared = prepared_run(tmp_path, "exploratory")
    prepared.loaded.controls = prepared.loaded.controls.model_copy(
        update={"budget": Budget(run_usd=1.0)}
    )
    spent = record(job_of(prepared, "model", "t1")).model_copy(update={"cost_usd": 0.75})
    prepared.run_dir.write_records([spent], [])
    client, run_id = redis_server.client(), prepared.meta.run_id
    client.set(keys.stopped(run_id), "interrupted")
    # The coordinator starts again (its account expired): it holds what the records spent,
    # and the run's workers may start its jobs again.
    assert run_budget.open_for(prepared, client) == 1.0
    assert run_budget.figures(client, run_id) == {
        "limit_usd": 1.0,
        "spent_usd": 0.75,
        "reached": False,
        "arms": {"model": 0.75},
    }
    assert client.get(keys.stopped(run_id)) is None
    account = run_budget.RedisAccounts(client).account(run_id, 1.0)
    assert account.debit("model", round(0.25 * MICROS))  # spent: the run's stop flag is set
    assert client.get(keys.stopped(run_id)) == run_budget.REASON.encode()
    # Resumed once more: the account is spent, so the flag stays and no job starts.
    run_budget.open_for(prepared, client)
    assert client.get(keys.stopped(run_id)) == run_budget.REASON.encode()
    assert run_budget.end_line(client, run_id, lambda: True) is None  # a trial still in flight
    line = run_budget.end_line(client, run_id, lambda: False)
    assert line is not None and "$1.0000 of $1.0000 (model $1.0000)" in line
