"""``report.json``: the report in the DeltaScorecard shape, written byte for byte the same.

Pure. Numbers are published rounded (``model.rounded``); the writer sorts keys and
formats floats as the standard library does, so ``replay`` rebuilds the file
byte for byte from ``trials.jsonl``.
"""

from __future__ import annotations

from json.encoder import encode_basestring
from typing import Any

from runner.evidence.scoring import ArmSummary, PairedDelta, gc_paused
from runner.report.accountings import Accountings
from runner.report.checklist import publish_instead
from runner.report.contents import (
    SCHEMA_VERSION,
    Pins,
    Report,
    metric_source,
    rate_json,
    rounded,
)
from runner.report.cost import cost_json
from runner.report.metric_deltas import MetricDelta


def _empty_pins(pins: Pins) -> set[str]:
    """The pins added after reports were first written, left out when the run has none."""
    added = ("agent_artifacts", "baseline_modes", "oci_runtime")
    return {key for key in added if not getattr(pins, key)}


@gc_paused()
def to_json(report: Report) -> dict[str, Any]:
    """The machine-readable report as plain data (``dumps_json`` writes it)."""
    scores, pins = report.scores, report.pins
    summaries = {s.arm: s for s in scores.summaries}
    edited = None
    if report.edited_from is not None:
        edited = {"reported_ledger_sha256": report.edited_from, "ledger_sha256": pins.ledger_sha256}
    data: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "stamp": report.stamp,
        "edited": edited,
        "verdict": report.verdict,
        "headline_withheld": report.withheld,
        "checklist": [{"item": r.item, "ok": r.ok, "detail": r.detail} for r in report.rows],
        "setup_warnings": list(report.setup_warnings),
        # agent_artifacts and baseline_modes only where the run has them: other reports keep
        # their bytes
        "pins": pins.model_dump(mode="json", exclude=_empty_pins(pins)),
        "arms": [_summary(s) for s in scores.summaries],
        "repeats": dict(report.repeats),
        "deltas": [
            _scorecard(report, d, summaries, refusal)
            for d, refusal in zip(scores.deltas, scores.refusal, strict=True)
        ],
        "baseline_legs": [_scorecard(report, d, summaries) for d in report.legs],
        "covariates": report.covariates,
        "per_task": report.per_task,
        "grading": report.grading,
        "metric_deltas": [_metric_delta(m, report) for m in report.metric_deltas],
    }
    if report.cost is not None:  # only when something is priced: older reports keep their bytes
        data["cost"] = cost_json(report.cost)
    if report.accountings is not None:  # not in runs recorded before: they keep their bytes
        data["accountings"] = accountings_json(report.accountings)
    data["publish_instead"] = [
        {"row": item, "publish": text} for item, text in publish_instead(report.rows)
    ]
    return withheld(data) if report.withheld else data


# The numbers of the comparison a withheld report keeps for its author only.
WITHHELD_KEYS = (
    "arms",
    "repeats",
    "deltas",
    "baseline_legs",
    "covariates",
    "metric_deltas",
    "cost",
    "accountings",
)
OPTIONAL = ("cost", "accountings")  # left out of a withheld report, not emptied
WITHHELD_NOTE = (
    "withheld: two or more checklist rows fail; these numbers are for the author, not for "
    "publication (see publish_instead)"
)


def withheld(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with every number of the comparison moved under ``withheld_for_author``; the
    publishable keys keep their type, emptied (``cost`` is left out)."""
    kept = {key: data[key] for key in WITHHELD_KEYS if key in data}
    out = {key: value for key, value in data.items() if key not in kept}
    out |= {key: type(value)() for key, value in kept.items() if key not in OPTIONAL}
    out["withheld_for_author"] = {"note": WITHHELD_NOTE, **kept}
    return out


def accountings_json(found: Accountings) -> dict[str, Any]:
    """``accountings``: per arm the pass rate with errors excluded and as failures, and
    the retries (``runner.report.accountings``)."""
    return {
        "arms": [
            {
                "arm": a.arm,
                "errors": a.errors,
                "errors_excluded": rate_json(a.excluded),
                "errors_as_failures": rate_json(a.as_failures),
                "retried": a.retried,
            }
            for a in found.arms
        ],
        "retried": found.retried,
        "retried_now": found.retried_now,
    }


def _metric_delta(m: MetricDelta, report: Report) -> dict[str, Any]:
    module, sha256 = metric_source(m.metric, report.pins)
    return {
        "candidate_arm": m.candidate,
        "control_arm": m.control,
        "metric": m.metric,
        "module": module,
        "sha256": sha256,
        "n_tasks": m.n_tasks,
        "control": rounded(m.control_mean),
        "candidate": rounded(m.candidate_mean),
        "delta": rounded(m.delta),
        "sd": rounded(m.sd),
    }


def _interval(value: tuple[float | None, float | None] | None) -> list[float | None] | None:
    return None if value is None else [value[0], value[1]]


def _summary(s: ArmSummary) -> dict[str, Any]:
    return {
        "arm": s.arm,
        "control": s.control,
        "trials": s.trials,
        "n": s.n,
        "passes": s.passes,
        "pass_rate": rate_json(s.pass_rate),
        "timeout_rate": rate_json(s.timeout_rate),
        "tool_violation_rate": rate_json(s.tool_violation_rate),
        "error_rate": rate_json(s.error_rate),
        "tokens_per_pass": rounded(s.tokens_per_pass, 3),  # null: no pass, or not metered
        "tokens_metered": s.tokens_metered,
        "wall_s_per_task": rounded(s.wall_s_per_task, 3),
        "retries_mean": rounded(s.retries_mean),
        "tool_calls_mean": rounded(s.tool_calls_mean),
        "refusal": {
            "abstention_accuracy": rate_json(s.abstention_accuracy),
            "invalid_completion_rate": rate_json(s.invalid_completion_rate),
            "false_abstention_rate": rate_json(s.false_abstention_rate),
        },
        "outcomes": s.outcomes,
        "stop_reasons": s.stop_reasons,
    }


def _case_delta(delta: float | None) -> float | int | None:
    """A task's delta; -1, 0 or +1 as integers when the arms agreed across their runs
    (always so for single runs: helped, same, hurt)."""
    if delta is not None and delta.is_integer():
        return int(delta)
    return rounded(delta)


def _case_status(status: str, delta: float | None) -> str:
    return status if delta is not None or status in ("error", "skipped") else "inconclusive"


def _refusal(d: PairedDelta | None) -> dict[str, Any] | None:
    """The refusal slice, paired: abstention accuracy candidate minus control."""
    if d is None or d.n_tasks == 0:
        return None
    return {
        "n_tasks": d.n_tasks,
        "mean": rounded(d.mean),
        "ci95": None if d.ci95 is None else [rounded(d.ci95[0]), rounded(d.ci95[1])],
        "ci_method": d.ci_method,
        "helped": d.helped,
        "hurt": d.hurt,
        "same": d.same,
        "inconclusive": d.inconclusive,
    }


def _scorecard(
    report: Report,
    d: PairedDelta,
    summaries: dict[str, ArmSummary],
    refusal: PairedDelta | None = None,
) -> dict[str, Any]:
    """One DeltaScorecard: a candidate (or leg) against its control, paired per task."""
    pins = report.pins
    control, candidate = summaries[d.control], summaries[d.arm]
    return {
        "schema_version": SCHEMA_VERSION,
        "suite_id": pins.suite_sha256,
        "control_arm": d.control,
        "candidate_arm": d.arm,
        "control_run_id": pins.run_id,
        "candidate_run_id": pins.run_id,
        "suite_path": report.suite_path,
        "generated_at": report.generated_at,
        # Plain numbers first (pass rates and the mean paired delta), the detail beside them.
        "control_aggregate": rounded(control.pass_rate.value),
        "candidate_aggregate": rounded(candidate.pass_rate.value),
        "aggregate_delta_value": rounded(d.mean),
        "control_detail": _summary(control),
        "candidate_detail": _summary(candidate),
        "aggregate_delta": {
            "n_tasks": d.n_tasks,
            "mean": rounded(d.mean),
            "sd": rounded(d.sd),
            "ci95": None if d.ci95 is None else [rounded(d.ci95[0]), rounded(d.ci95[1])],
            "ci_method": d.ci_method,
            "mde": rounded(d.mde),
            "bootstrap95": _interval(report.bootstrap.get((d.arm, d.control))),
            "mcnemar_p": rounded(d.mcnemar_p, 9),
            "helped": d.helped,
            "hurt": d.hurt,
            "same": d.same,
            "inconclusive": d.inconclusive,
        },
        "per_case": [
            {
                "case_id": c.task_id,
                "control_status": _case_status(c.control_status, c.delta),
                "candidate_status": _case_status(c.candidate_status, c.delta),
                "control_score": rounded(c.control_score),
                "candidate_score": rounded(c.candidate_score),
                "delta": _case_delta(c.delta),
            }
            for c in d.cases
        ],
        "refusal_delta": _refusal(refusal),
    }


def dumps_json(report: dict[str, Any]) -> str:
    """``json.dumps(report, indent=2, sort_keys=True, ensure_ascii=False) + "\\n"``, byte for byte.

    The standard library writes indented JSON with its pure-Python encoder, one
    small string per token: for a 100,000-record run that is ~3 million strings
    (over a second, and ~150 MB held at once). This writer joins each container's items
    directly and encodes strings with the same C function, so the text is identical.
    """
    return _encode(report, "\n") + "\n"


_INF = float("inf")


def _float(value: float) -> str:
    if value != value:
        return "NaN"
    if value == _INF:
        return "Infinity"
    if value == -_INF:
        return "-Infinity"
    return float.__repr__(value)


_SCALARS: dict[type, Any] = {
    str: encode_basestring,
    int: int.__repr__,
    float: _float,
    bool: lambda value: "true" if value else "false",
    type(None): lambda value: "null",
}


def _key(key: Any) -> str:
    """A dict key as the json module writes it (str, float, bool, None or int)."""
    if isinstance(key, str):
        return encode_basestring(key)
    if isinstance(key, float):
        return encode_basestring(_float(key))
    if key is True or key is False or key is None:
        return f'"{_SCALARS[type(key)](key)}"'
    if isinstance(key, int):
        return encode_basestring(int.__repr__(key))
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def _encode(value: Any, newline: str) -> str:
    """One value at the depth whose line break and indent is ``newline``."""
    scalar = _SCALARS.get(type(value))
    if scalar is not None:
        return str(scalar(value))
    # Subclasses (str, int and float enums, ...) in the json module's order of checks.
    if isinstance(value, str):
        return encode_basestring(value)
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        return _float(value)
    inner = newline + "  "
    parts: list[str] = []
    if isinstance(value, list | tuple):
        if not value:
            return "[]"
        for item in value:
            scalar = _SCALARS.get(type(item))
            parts.append(scalar(item) if scalar is not None else _encode(item, inner))
        return "[" + inner + ("," + inner).join(parts) + newline + "]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        for key, item in sorted(value.items()):
            scalar = _SCALARS.get(type(item))
            name = encode_basestring(key) if type(key) is str else _key(key)
            parts.append(
                name + ": " + (scalar(item) if scalar is not None else _encode(item, inner))
            )
        return "{" + inner + ("," + inner).join(parts) + newline + "}"
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")
