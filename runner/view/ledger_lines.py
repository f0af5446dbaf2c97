"""One ledger line → what the viewer shows of it: a small index entry for the matrix and,
on demand, the trial's full detail. Pure (the session archive's files are handed in).

A line is read as JSON, never trusted: a record the ``Trial`` schema does not accept (a
newer deltarun's field, a hand edit, a line that is not JSON) is still shown, with a note
saying what is wrong; nothing here raises on a record's content.
"""

from __future__ import annotations

import json
import math
from typing import Any

from pydantic import ValidationError

from runner.records import Outcome, Trial
from runner.view.steps import steps
from runner.view.text import (
    canaries,
    canary_note,
    dropped_view,
    failing_tests,
    lines_with,
    patch_view,
    shown_text,
)

KNOWN = frozenset(Trial.model_fields)
REQUIRED = frozenset(name for name, info in Trial.model_fields.items() if info.is_required())
OUTCOMES = tuple(outcome.value for outcome in Outcome)
GOOD = (Outcome.SUCCESS.value, Outcome.ABSTAIN_OK.value)  # a pass; on a negative task, abstaining
SHOWN_ELSEWHERE = frozenset(
    {
        "patch", "patch_encoding", "patch_truncated", "verify_log", "verify_log_truncated",
        "agent_log", "agent_log_truncated", "transcript", "transcript_truncated", "answer",
        "session", "dropped", "reason",
    }
)  # fmt: skip


def parse(line: str) -> tuple[dict[str, Any], str]:
    """The record as a dict and a note ("" when it looks like a ``Trial``)."""
    try:
        data = json.loads(line)
    except (ValueError, RecursionError) as exc:
        return {}, f"not JSON ({str(exc)[:200]}): shown as text"
    if not isinstance(data, dict):
        return {"value": data}, "not a JSON object: shown as is"
    return data, schema_note(data)


def schema_note(data: dict[str, Any]) -> str:
    """What keeps ``data`` from being a record this deltarun knows, cheaply ("" if nothing)."""
    unknown = sorted(str(key) for key in data if key not in KNOWN)
    missing = sorted(REQUIRED - data.keys())
    parts = []
    if unknown:
        parts.append(f"fields this deltarun does not know: {', '.join(unknown)[:300]}")
    if missing:
        parts.append(f"missing fields: {', '.join(missing)}")
    if data.get("outcome") not in OUTCOMES and "outcome" in data:
        parts.append(f"unknown outcome {str(data.get('outcome'))[:60]!r}")
    return "; ".join(parts)


def _text(value: Any, limit: int = 200) -> str:
    return value[:limit] if isinstance(value, str) else "" if value is None else str(value)[:limit]


def _number(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if ok and math.isfinite(value) else None


def summary(number: int, data: dict[str, Any], note: str) -> dict[str, Any]:
    """The matrix's entry of record ``number`` (its line in the ledger)."""
    outcome = _text(data.get("outcome"), 60) or "unknown"
    return {
        "i": number,
        "job": _text(data.get("job_id"), 100),
        "task": _text(data.get("task_id"), 300) or "(no task id)",
        "arm": _text(data.get("arm"), 200) or "(no arm)",
        "rep": data.get("repeat") if isinstance(data.get("repeat"), int) else None,
        "out": outcome,
        "passed": data.get("passed") is True,
        "good": outcome in GOOD,
        "tv": data.get("tool_violation") is True,
        "stop": _text(data.get("stop_reason"), 100) or None,
        "wall": _number(data.get("wall_s")),
        "note": note,
    }


def detail(number: int, line: str, session: list[dict[str, Any]] | None) -> dict[str, Any]:
    """Everything the side-by-side view shows of the record on ledger line ``number``."""
    data, note = parse(line)
    if not data and note:
        return {"i": number, "note": note, "raw": shown_text(line)}
    if not note:
        try:
            Trial.model_validate_json(line)
        except ValidationError as exc:
            first = exc.errors()[0]
            place = ".".join(str(part) for part in first["loc"])
            note = f"not a valid trial record ({place}: {first['msg']})"[:400]
    log = _text(data.get("verify_log"), 10**9)
    failing = failing_tests(log)
    out = {
        **summary(number, data, note),
        "patch": patch_view(
            data.get("patch"), data.get("patch_encoding"), data.get("patch_truncated")
        ),
        "dropped": dropped_view([_text(path, 500) for path in _list(data.get("dropped"))[:500]]),
        "reason": shown_text(data.get("reason"), 20_000),
        "verify": {
            **shown_text(log),
            "failing": failing,
            "canaries": canaries(log),
            "canary_note": canary_note(log),
            "marks": lines_with(log, failing),
        },
        "verify_cut": data.get("verify_log_truncated") is True,
        "agent_log": shown_text(data.get("agent_log")),
        "agent_log_cut": data.get("agent_log_truncated") is True,
        "steps": steps(data.get("transcript")),
        "steps_cut": data.get("transcript_truncated") is True,
        "session": session,
        "answer": None if data.get("answer") is None else shown_text(_json(data.get("answer"))),
        "facts": facts(data),
    }
    return out


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _json(value: Any) -> str:
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError, RecursionError):
        return str(value)


def facts(data: dict[str, Any]) -> list[list[str]]:
    """The record's other fields as (name, text) rows: tokens, cost, timings, stop reason,
    violations, limits, and any field this deltarun does not know."""
    rows = []
    for key, value in data.items():
        if key in SHOWN_ELSEWHERE or value in (None, "", [], {}):
            continue
        text = value if isinstance(value, str) else _json(value)
        rows.append([_text(key, 100), shown_text(text, 4000)["text"]])
    return rows
