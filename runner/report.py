"""Report rendering: scores → ``report.json`` (DeltaScorecard shape) and ``report.md``. Pure.

Rendering is deterministic (sorted keys, fixed float formats, no clock), so
``replay`` rebuilds both files byte for byte from ``trials.jsonl``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from json.encoder import encode_basestring
from operator import attrgetter
from typing import Any

from runner.checklist import Row, verdict, withhold_headline
from runner.models import Outcome, Record, TaskKind
from runner.repeats import repeat_stats
from runner.scoring import ArmSummary, PairedDelta, Rate, Scores, gc_paused
from runner.stats import paired_bootstrap_interval

SCHEMA_VERSION = 1
EXPLORATORY_STAMP = "exploratory — not for publication"


@dataclass(frozen=True)
class Pins:
    """What a stranger needs to replay the numbers."""

    protocol_id: str
    protocol_sha256: str
    suite_sha256: str
    channel: str
    run_id: str
    control_arm: str
    image_digests: dict[str, str]
    agent_dir_digests: dict[str, str]
    ledger_sha256: str
    deltarun_version: str
    python_version: str
    edited_from: str | None = None  # the ledger digest first reported, when edits were accepted
    metrics: dict[str, Any] | None = None  # the pinned metrics module: module, sha256, functions


def _r(value: float | None, digits: int = 6) -> float | None:
    return None if value is None else round(value, digits)


def _rate(rate: Rate) -> dict[str, Any]:
    interval = rate.wilson95
    return {
        "k": rate.k,
        "n": rate.n,
        "value": _r(rate.value),
        "wilson95": None if interval is None else [_r(interval[0]), _r(interval[1])],
    }


def _summary(s: ArmSummary) -> dict[str, Any]:
    return {
        "arm": s.arm,
        "control": s.control,
        "trials": s.trials,
        "n": s.n,
        "passes": s.passes,
        "pass_rate": _rate(s.pass_rate),
        "timeout_rate": _rate(s.timeout_rate),
        "tool_violation_rate": _rate(s.tool_violation_rate),
        "error_rate": _rate(s.error_rate),
        "tokens_per_pass": _r(s.tokens_per_pass, 3),
        "wall_s_per_task": _r(s.wall_s_per_task, 3),
        "retries_mean": _r(s.retries_mean),
        "tool_calls_mean": _r(s.tool_calls_mean),
        "refusal": {
            "abstention_accuracy": _rate(s.abstention_accuracy),
            "invalid_completion_rate": _rate(s.invalid_completion_rate),
            "false_abstention_rate": _rate(s.false_abstention_rate),
        },
        "outcomes": s.outcomes,
        "stop_reasons": s.stop_reasons,
    }


def _case_status(status: str, delta: float | None) -> str:
    return status if delta is not None or status in ("error", "skipped") else "inconclusive"


def _bootstrap(d: PairedDelta, resamples: int, seed: int) -> list[float | None] | None:
    diffs = [c.delta for c in d.cases if c.delta is not None]
    if resamples <= 0 or len(diffs) < 2:
        return None
    rng = random.Random(f"{seed}:{d.arm}:{d.control}")  # a string seed is stable across runs
    low, high = paired_bootstrap_interval(diffs, rng, resamples=resamples)
    return [_r(low), _r(high)]


def _scorecard(
    d: PairedDelta, pins: Pins, summaries: dict[str, ArmSummary], bootstrap: tuple[int, int]
) -> dict[str, Any]:
    control, candidate = summaries[d.control], summaries[d.arm]
    return {
        "schema_version": SCHEMA_VERSION,
        "suite_id": pins.suite_sha256,
        "control_arm": d.control,
        "candidate_arm": d.arm,
        "control_run_id": pins.run_id,
        "candidate_run_id": pins.run_id,
        "control_aggregate": _summary(control),
        "candidate_aggregate": _summary(candidate),
        "aggregate_delta": {
            "n_tasks": d.n_tasks,
            "mean": _r(d.mean),
            "sd": _r(d.sd),
            "ci95": None if d.ci95 is None else [_r(d.ci95[0]), _r(d.ci95[1])],
            "bootstrap95": _bootstrap(d, *bootstrap),
            "mcnemar_p": _r(d.mcnemar_p, 9),
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
                "control_score": _r(c.control_score),
                "candidate_score": _r(c.candidate_score),
                "delta": _r(c.delta),
            }
            for c in d.cases
        ],
    }


def covariates(trials: Sequence[Record], tasks: Sequence[dict[str, str]]) -> dict[str, Any]:
    """Pass rate per arm within each size bucket of ordinary tasks, with Wilson intervals."""
    bucket = {t["id"]: t.get("size_bucket") or "unset" for t in tasks}
    counts: dict[str, dict[str, list[int]]] = {}
    for t in trials:
        if t.task_kind is not TaskKind.ORDINARY or t.outcome is Outcome.ERROR:
            continue
        cell = counts.setdefault(bucket.get(t.task_id, "unset"), {}).setdefault(t.arm, [0, 0])
        cell[0] += int(t.passed)
        cell[1] += 1
    return {
        "size_bucket": {
            b: {arm: _rate(Rate(k, n)) for arm, (k, n) in sorted(arms.items())}
            for b, arms in sorted(counts.items())
        }
    }


@gc_paused()
def report_json(
    scores: Scores,
    pins: Pins,
    trials: Sequence[Record],
    rows: Sequence[Row] = (),
    bootstrap: tuple[int, int] = (0, 0),
    legs: Sequence[PairedDelta] = (),
    tasks: Sequence[dict[str, str]] = (),
) -> dict[str, Any]:
    """The machine-readable report."""
    summaries = {s.arm: s for s in scores.summaries}
    by_arm: dict[str, list[Record]] = {}
    for t in trials:
        by_arm.setdefault(t.arm, []).append(t)
    per_task: dict[str, dict[str, list[str]]] = {}
    for t in sorted(trials, key=attrgetter("task_id", "arm", "repeat")):
        per_task.setdefault(t.task_id, {}).setdefault(t.arm, []).append(t.outcome._value_)
    return {
        "schema_version": SCHEMA_VERSION,
        "stamp": EXPLORATORY_STAMP if pins.channel != "scored" else None,
        "edited": None
        if pins.edited_from is None
        else {"reported_ledger_sha256": pins.edited_from, "ledger_sha256": pins.ledger_sha256},
        "verdict": verdict(rows) if rows else None,
        "headline_withheld": withhold_headline(rows) if rows else False,
        "checklist": [{"item": r.item, "ok": r.ok, "detail": r.detail} for r in rows],
        "pins": {
            "protocol_id": pins.protocol_id,
            "protocol_sha256": pins.protocol_sha256,
            "suite_sha256": pins.suite_sha256,
            "channel": pins.channel,
            "run_id": pins.run_id,
            "control_arm": pins.control_arm,
            "image_digests": pins.image_digests,
            "agent_dir_digests": pins.agent_dir_digests,
            "ledger_sha256": pins.ledger_sha256,
            "deltarun_version": pins.deltarun_version,
            "python_version": pins.python_version,
            "metrics": pins.metrics,
        },
        "arms": [_summary(s) for s in scores.summaries],
        "repeats": {s.arm: repeat_stats(by_arm.get(s.arm, [])) for s in scores.summaries},
        "deltas": [_scorecard(d, pins, summaries, bootstrap) for d in scores.deltas],
        "baseline_legs": [_scorecard(d, pins, summaries, bootstrap) for d in legs],
        "covariates": covariates(trials, tasks),
        "per_task": per_task,
        # How each task's verdict is decided (pytest: declared tests; exit_status: a command's
        # exit status alone; metrics: an answer task; none: a negative control).
        "grading": {t["id"]: t.get("grading", "exit_status") for t in tasks},
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


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _signed_pp(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:+.1f} pp"


def _rate_md(rate: Rate) -> str:
    interval = rate.wilson95
    if interval is None:
        return "n/a (n=0)"
    return f"{_pct(rate.value)} [{_pct(interval[0])}, {_pct(interval[1])}] ({rate.k}/{rate.n})"


def _num(value: float | None, fmt: str = ".2f") -> str:
    return "n/a" if value is None else format(value, fmt)


def headline(d: PairedDelta) -> str:
    """One line: the delta with its interval, test and counts; never a bare candidate rate."""
    if d.mean is None:
        return f"{d.arm} vs {d.control}: no paired tasks (inconclusive: {d.inconclusive})"
    ci = "n/a" if d.ci95 is None else f"{_signed_pp(d.ci95[0])} to {_signed_pp(d.ci95[1])}"
    p = "n/a" if d.mcnemar_p is None else f"{d.mcnemar_p:.4g}"
    return (
        f"{d.arm} vs {d.control}: {_signed_pp(d.mean)} pass rate (95% CI {ci}), "
        f"n={d.n_tasks} tasks, McNemar p={p}; helped {d.helped}, hurt {d.hurt}, "
        f"same {d.same}, inconclusive {d.inconclusive}"
    )


def report_markdown(scores: Scores, pins: Pins, report: dict[str, Any]) -> str:
    """The human-readable report."""
    lines: list[str] = [f"# deltarun report: {pins.protocol_id}", ""]
    if pins.channel != "scored":
        lines += [f"> **{EXPLORATORY_STAMP}**", ""]
    if pins.edited_from is not None:
        lines += [
            f"> **edited after the run**: the ledger reported as `{pins.edited_from}` now has "
            f"digest `{pins.ledger_sha256}`; the edits were accepted with `--accept-edits`",
            "",
        ]
    checklist = report.get("checklist") or []
    if report.get("verdict"):
        failing = [row["item"] for row in checklist if not row["ok"]]
        lines += [
            f"**Verdict: {report['verdict']}**"
            + (f" (failing: {'; '.join(failing)})" if failing else ""),
            "",
        ]
    lines += ["## Pins", "", "| pin | value |", "|---|---|"]
    lines += [
        f"| protocol | `{pins.protocol_id}` `{pins.protocol_sha256}` |",
        f"| suite sha256 | `{pins.suite_sha256}` |",
        f"| channel | {pins.channel} |",
        f"| run id | `{pins.run_id}` |",
        f"| control arm | {pins.control_arm} |",
        f"| ledger sha256 | `{pins.ledger_sha256}` |",
    ]
    for image, digest in sorted(pins.image_digests.items()):
        lines.append(f"| image `{image}` | `{digest}` |")
    for arm, digest in sorted(pins.agent_dir_digests.items()):
        lines.append(f"| agent dir of {arm} | `{digest}` |")
    if pins.metrics is not None:
        for name in pins.metrics["functions"]:
            lines.append(
                f"| metric `{name}` | `{pins.metrics['module']}` `{pins.metrics['sha256']}` |"
            )
    lines += [f"| deltarun / Python | {pins.deltarun_version} / {pins.python_version} |", ""]

    lines += ["## Headline", ""]
    if report.get("headline_withheld"):
        lines += [
            "- withheld: two or more checklist rows fail (see Checklist); the deltas "
            "below are for inspection, not for quoting"
        ]
    else:
        lines += [f"- {headline(d)}" for d in scores.deltas] or ["- no candidate arm"]
    lines += ["", "## Arms", ""]
    lines += [
        "| arm | n | pass rate [Wilson 95%] | timeouts | tool violations | errors "
        "| tokens/pass | wall s/trial | retries | tool calls |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in scores.summaries:
        name = f"{s.arm} (control)" if s.control else s.arm
        lines.append(
            f"| {name} | {s.n} | {_rate_md(s.pass_rate)} | {_rate_md(s.timeout_rate)} "
            f"| {_rate_md(s.tool_violation_rate)} | {_rate_md(s.error_rate)} "
            f"| {_num(s.tokens_per_pass, '.1f')} | {_num(s.wall_s_per_task)} "
            f"| {_num(s.retries_mean)} | {_num(s.tool_calls_mean)} |"
        )
    stopped = [s for s in scores.summaries if s.stop_reasons]
    if stopped:
        reasons = sorted({r for s in stopped for r in s.stop_reasons})
        lines += ["", "## How model-driven trials ended", ""]
        lines += ["| arm | " + " | ".join(reasons) + " |", "|---|" + "---|" * len(reasons)]
        for s in stopped:
            counts = " | ".join(str(s.stop_reasons.get(r, 0)) for r in reasons)
            lines.append(f"| {s.arm} | {counts} |")
    lines += ["", "## Refusal slice (negative controls)", ""]
    lines += [
        "| arm | abstention accuracy | invalid completions | false abstentions (ordinary) |",
        "|---|---|---|---|",
    ]
    for s in scores.summaries:
        lines.append(
            f"| {s.arm} | {_rate_md(s.abstention_accuracy)} "
            f"| {_rate_md(s.invalid_completion_rate)} | {_rate_md(s.false_abstention_rate)} |"
        )
    lines += ["", "## Paired deltas", ""]
    boot = {
        card["candidate_arm"]: card["aggregate_delta"].get("bootstrap95")
        for card in report.get("deltas", [])
    }
    for d in scores.deltas:
        lines += [f"### {d.arm} vs {d.control}", ""]
        if boot.get(d.arm):
            low, high = boot[d.arm]
            lines += [f"paired bootstrap 95%: {_signed_pp(low)} to {_signed_pp(high)}", ""]
        lines += [
            f"mean {_signed_pp(d.mean)}, sd {_num(d.sd, '.3f')}, "
            f"helped {d.helped}, hurt {d.hurt}, same {d.same}, inconclusive {d.inconclusive}",
            "",
            "| task | control | candidate | delta |",
            "|---|---|---|---|",
        ]
        for c in d.cases:
            delta = "inconclusive" if c.delta is None else f"{c.delta:+.2f}"
            lines.append(f"| {c.task_id} | {c.control_status} | {c.candidate_status} | {delta} |")
        lines.append("")
    buckets = (report.get("covariates") or {}).get("size_bucket") or {}
    if buckets:
        arms_seen = [s.arm for s in scores.summaries]
        lines += ["## Covariates: pass rate by size bucket", ""]
        lines += ["| bucket | " + " | ".join(arms_seen) + " |", "|---" * (len(arms_seen) + 1) + "|"]
        for name, by_arm in buckets.items():
            cells = []
            for arm in arms_seen:
                rate = by_arm.get(arm)
                cells.append(
                    "—" if rate is None else f"{_pct(rate['value'])} ({rate['k']}/{rate['n']})"
                )
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    legs = report.get("baseline_legs") or []
    if legs:
        lines += ["## Baseline legs (capability on vs off)", ""]
        for card in legs:
            agg = card["aggregate_delta"]
            ci = agg["ci95"]
            ci_text = "n/a" if ci is None else f"{_signed_pp(ci[0])} to {_signed_pp(ci[1])}"
            lines += [
                f"- {card['candidate_arm']} vs {card['control_arm']}: {_signed_pp(agg['mean'])} "
                f"(95% CI {ci_text}), n={agg['n_tasks']} tasks; helped {agg['helped']}, "
                f"hurt {agg['hurt']}, same {agg['same']}, inconclusive {agg['inconclusive']}"
            ]
        lines.append("")
    lines += ["## Outcomes per task", ""]
    arms = [s.arm for s in scores.summaries]
    grading = report.get("grading") or {}
    lines += ["| task | graded by | " + " | ".join(arms) + " |", "|---" * (len(arms) + 2) + "|"]
    for task_id, by_arm in sorted(report["per_task"].items()):
        cells = [", ".join(by_arm.get(arm, ["—"])) for arm in arms]
        how = grading.get(task_id, "—")
        lines.append(f"| {task_id} | {how} | " + " | ".join(cells) + " |")
    lines.append("")
    if checklist:
        lines += ["## Checklist", "", "| | item | detail |", "|---|---|---|"]
        for row in checklist:
            mark = "yes" if row["ok"] else "**no**"
            lines.append(f"| {mark} | {row['item']} | {row['detail']} |")
        lines.append("")
    return "\n".join(lines)
