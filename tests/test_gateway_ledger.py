"""The harness's reading of the gateway's ledger (runner/sandbox/gateway_ledger.py) and what
the agent's record makes of it (runner/agents/guarded.model_usage): the exchanges always sum
to the ledger's totals, whatever its capped lines leave out, and every model name any of
them gives is held to the route lock. Pure: ledgers are made here as the proxy writes them."""

from __future__ import annotations

import io
import json
import tarfile
from typing import Any

import pytest

from runner.agents.guarded import model_usage
from runner.agents.interface import AgentResult
from runner.config.arms import Route
from runner.errors import SandboxError
from runner.sandbox.gateway_ledger import read_ledger

ROUTE = Route(base_url="http://127.0.0.1/v1", model="m-1", accept_models=["m-1-2026"])


def ledger(totals: dict[str, Any] | None, lines: list[dict[str, Any]]) -> bytes:
    """A ledger directory as ``get_archive`` streams it."""
    buffer = io.BytesIO()
    files = {"ledger/exchanges.jsonl": "".join(json.dumps(line) + "\n" for line in lines)}
    if totals is not None:
        files["ledger/totals.json"] = json.dumps(totals)
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def line(prompt: int, completion: int, model: str = "m-1", **extra: Any) -> dict[str, Any]:
    return {
        "path": "/v1/messages",
        "status": 200,
        "model": model,
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "models": [model],
        **extra,
    }


def totals(prompt: int, completion: int, **extra: Any) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "models": ["m-1"],
        "tool_names": [],
        "pending": [],
        **extra,
    }


def test_what_the_lines_leave_out_is_still_counted_and_checked() -> None:
    # Lines past the cap were dropped: 32,000 billed tokens and another model among them.
    data = ledger(
        totals(32_110, 950, models=["m-1", "impostor"], tool_names=["Bash"], budget_refused=1),
        [line(110, 50)],
    )
    exchanges = read_ledger([data])
    assert sum(e.prompt_tokens for e in exchanges) == 32_110
    assert sum(e.completion_tokens for e in exchanges) == 950
    rest = exchanges[-1]
    assert "not_itemised" in rest.flags and rest.models == ("impostor",)
    assert rest.tool_calls == ("Bash",) and rest.budget_exhausted
    judged = model_usage(AgentResult(), [e.call() for e in exchanges], ROUTE)
    assert (judged.prompt_tokens, judged.completion_tokens) == (32_110, 950)
    assert judged.route_mismatch and "impostor" in (judged.error or "")


def test_a_request_in_flight_when_the_proxy_stopped_counts_at_its_maximum() -> None:
    pending = [{"path": "/v1/responses", "prompt_tokens": 4_000, "completion_tokens": 25_000}]
    exchanges = read_ledger([ledger(totals(10, 1, pending=pending), [line(10, 1)])])
    lost = exchanges[-1]
    assert (lost.path, lost.prompt_tokens, lost.completion_tokens) == (
        "/v1/responses",
        4_000,
        25_000,
    )
    assert set(lost.flags) == {"estimated", "lost"}
    judged = model_usage(AgentResult(), [e.call() for e in exchanges], ROUTE)
    assert judged.completion_tokens == 25_001
    assert "1 requests in flight when the gateway stopped" in judged.log
    assert not judged.route_mismatch


def test_whole_lines_add_nothing() -> None:
    exchanges = read_ledger([ledger(totals(30, 3), [line(10, 1), line(20, 2, "m-1-2026")])])
    assert len(exchanges) == 2
    assert not model_usage(AgentResult(), [e.call() for e in exchanges], ROUTE).route_mismatch


def test_flags_reach_the_agent_log_and_too_many_names_break_the_lock() -> None:
    flagged = line(10, 2048, flags=["estimated", "cut"])
    reflected = line(5, 1, flags=["key_reflected"])
    crowded = line(1, 1, flags=["models_overflow"])
    exchanges = read_ledger([ledger(totals(16, 2050), [flagged, reflected, crowded])])
    judged = model_usage(AgentResult(), [e.call() for e in exchanges], ROUTE)
    assert "1 answers the gateway could not read whole" in judged.log
    assert "1 answers that carried the gateway's key back" in judged.log
    assert judged.route_mismatch


@pytest.mark.parametrize("data", [b"", b"not a tar", ledger(None, [line(1, 1)])])
def test_a_ledger_without_its_totals_is_an_error(data: bytes) -> None:
    with pytest.raises(SandboxError, match="ledger"):
        read_ledger([data])


def test_a_later_model_name_breaks_the_lock_as_the_first_would() -> None:
    mixed = line(10, 1, models=["m-1", "impostor"])  # the pinned one first, then another
    exchanges = read_ledger([ledger(totals(10, 1, models=["m-1", "impostor"]), [mixed])])
    judged = model_usage(AgentResult(), [e.call() for e in exchanges], ROUTE)
    assert judged.route_mismatch and "impostor" in (judged.error or "")
