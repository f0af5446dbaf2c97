"""``report.md``: the report for a person, section by section. Pure.

Every section renders from the one ``Report``; numbers are formatted here
(percentages to one decimal, deltas in percentage points), never recomputed.
"""

from __future__ import annotations

from collections.abc import Callable

from runner.evidence.scoring import ArmSummary, PairedDelta, Rate, Scores
from runner.report.accountings import INTRO, retried_text
from runner.report.checklist import publish_instead
from runner.report.contents import EXPLORATORY_STAMP, Pins, Report, metric_source, rounded
from runner.report.cost import cost_markdown
from runner.report.format import (
    REFUSAL_NOT_MEASURED,
    cost_line,
    detectable,
    method_name,
    num,
    pct,
    signed_pp,
)


def headline(d: PairedDelta) -> str:
    """One line: the delta with its interval (and the method), test, the smallest delta the
    run could detect, and counts; never a bare candidate rate."""
    if d.mean is None:
        return f"{d.arm} vs {d.control}: no paired tasks (inconclusive: {d.inconclusive})"
    p = "n/a" if d.mcnemar_p is None else f"{d.mcnemar_p:.4g}"
    return (
        f"{d.arm} vs {d.control}: {signed_pp(d.mean)} pass rate ({_ci(d)}), "
        f"n={d.n_tasks} tasks, McNemar p={p}, {detectable(d.mde)}; helped {d.helped}, "
        f"hurt {d.hurt}, "
        f"same {d.same}, inconclusive {d.inconclusive}"
    )


def _ci(d: PairedDelta) -> str:
    if d.ci95 is None:
        return "95% CI n/a"
    return f"95% CI {signed_pp(d.ci95[0])} to {signed_pp(d.ci95[1])}, {method_name(d.ci_method)}"


def headline_lines(scores: Scores) -> list[str]:
    """No metric alone: for each candidate the pass-rate delta, the refusal-slice delta and
    the cost beside the control's. Continuation lines start with two spaces."""
    by_arm = {s.arm: s for s in scores.summaries}
    lines: list[str] = []
    for d, r in zip(scores.deltas, scores.refusal, strict=True):
        lines.append(headline(d))
        if r.n_tasks == 0:
            lines.append(f"  {REFUSAL_NOT_MEASURED}")
        else:
            lines.append(
                f"  refusal slice: {signed_pp(r.mean)} abstention accuracy ({_ci(r)}), "
                f"n={r.n_tasks} negative tasks"
            )
        cand, ctrl = by_arm.get(d.arm), by_arm.get(d.control)
        if cand is not None and ctrl is not None:
            tokens = cand.tokens_per_pass, ctrl.tokens_per_pass
            walls = cand.wall_s_per_task, ctrl.wall_s_per_task
            metered = cand.tokens_metered, ctrl.tokens_metered
            lines.append(f"  {cost_line(*tokens, *walls, metered)}")
    return lines


Section = Callable[[Report], list[str]]


def render_markdown(report: Report) -> str:
    """The human-readable report."""
    lines: list[str] = []
    numbers: list[Section] = [_arms, _errors, _cost, _refusal, _deltas, _metric_deltas]
    numbers += [_covariates, _legs]
    sections: list[Section]
    if not report.withheld:
        sections = [_top, _headline, _pins, _arms, _errors, _cost, _stops, _refusal, _deltas]
        sections += [_metric_deltas, _covariates, _legs, _outcomes, _setup, _checklist]
    else:  # the comparison's numbers last, under a heading that says they are not to publish
        sections = [_top, _headline, _pins, _stops, _outcomes, _setup, _checklist, _withheld]
        sections += numbers
    for section in sections:
        lines += section(report)
    return "\n".join(lines)


def _withheld(report: Report) -> list[str]:
    return [
        "",
        "## Withheld numbers: for the author, not for publication",
        "",
        "Two or more checklist rows fail, so every number of the comparison below is "
        "withheld (in report.json they are under `withheld_for_author`). Publish instead "
        "what the Headline says.",
    ]


def _rate(rate: Rate) -> str:
    interval = rate.wilson95
    if interval is None:
        return "n/a (n=0)"
    return f"{pct(rate.value)} [{pct(interval[0])}, {pct(interval[1])}] ({rate.k}/{rate.n})"


def _top(report: Report) -> list[str]:
    pins = report.pins
    lines = [f"# deltarun report: {pins.protocol_id}", ""]
    if report.stamp is not None:
        lines += [f"> **{EXPLORATORY_STAMP}**", ""]
    if report.edited_from is not None:
        lines += [
            f"> **edited after the run**: the ledger reported as `{report.edited_from}` now has "
            f"digest `{pins.ledger_sha256}`; the edits were accepted with `--accept-edits`",
            "",
        ]
    if report.verdict:
        failing = [row.item for row in report.rows if not row.ok]
        lines += [
            f"**Verdict: {report.verdict}**"
            + (f" (failing: {'; '.join(failing)})" if failing else ""),
            "",
        ]
    return lines


def _pins(report: Report) -> list[str]:
    return ["## Pins", "", "| pin | value |", "|---|---|", *pin_rows(report.pins)]


def pin_rows(pins: Pins) -> list[str]:
    """The rows of the pins table."""
    lines = [
        f"| suite sha256 | `{pins.suite_sha256}` |",
        f"| validation sha256 | `{pins.validation_sha256 or 'not validated'}` |",
        f"| excluded tasks | {', '.join(pins.excluded) or 'none'} |",
        f"| protocol | `{pins.protocol_id}` `{pins.protocol_sha256}` |",
        f"| channel | {pins.channel} |",
        f"| run id | `{pins.run_id}` |",
        f"| control arm | {pins.control_arm} |",
        f"| ledger sha256 | `{pins.ledger_sha256}` |",
    ]
    if pins.timeout_s is not None:
        lines.append(f"| timeout / seed | {pins.timeout_s:g} s / {pins.seed} |")
    for arm, route in sorted(pins.routes.items()):
        lines.append(
            f"| route of {arm} | `{route.model}` at `{route.base_url}`, "
            f"temperature {route.temperature:g} |"
        )
    for image, digest in sorted(pins.image_digests.items()):
        lines.append(f"| image `{image}` | `{digest}` |")
    for arm, digest in sorted(pins.agent_dir_digests.items()):
        lines.append(f"| agent dir of {arm} | `{digest}` |")
    for arm, pin in sorted(pins.agent_artifacts.items()):
        digest = pin.get("artifacts_sha256") or "not pinned"
        lines.append(f"| agent of {arm} | `{pin.get('agent', '?')}` artifacts `{digest}` |")
    if pins.oci_runtime:
        lines.append(f"| OCI runtime | {pins.oci_runtime} |")
    for arm, mode in sorted(pins.baseline_modes.items()):
        lines.append(f"| baseline mode of {arm} | {mode} |")
    if pins.metrics is not None:
        for name in pins.metrics.functions:
            lines.append(f"| metric `{name}` | `{pins.metrics.module}` `{pins.metrics.sha256}` |")
    lines += [f"| deltarun / Python | {pins.deltarun_version} / {pins.python_version} |"]
    return lines


def _headline(report: Report) -> list[str]:
    lines = ["## Headline", ""]
    if report.withheld:
        lines += [
            "- withheld: two or more checklist rows fail (see Checklist); the comparison's "
            "numbers are at the end, for the author, not for publication",
            "- what may be published instead (seed 004's decision table):",
            *(f"  - {item}: {text}" for item, text in publish_instead(report.rows)),
        ]
    else:
        lines += [
            f"  - {line.strip()}" if line.startswith("  ") else f"- {line}"
            for line in headline_lines(report.scores)
        ] or ["- no candidate arm"]
    return [*lines, ""]


def _metric_deltas(report: Report) -> list[str]:
    if not report.metric_deltas:
        return []
    lines = [
        "",
        "## Answer metrics",
        "",
        "Each metric of the answer tasks on its own, paired per task (repeats averaged first).",
        "",
        "| candidate vs control | metric | module | sha256 | n tasks | control | candidate "
        "| delta | sd |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for m in report.metric_deltas:
        module, sha256 = metric_source(m.metric, report.pins)
        lines.append(
            f"| {m.candidate} vs {m.control} | `{m.metric}` | `{module}` "
            f"| `{sha256[:12] or 'not recorded'}` | {m.n_tasks} | {pct(m.control_mean)} "
            f"| {pct(m.candidate_mean)} | {signed_pp(m.delta)} "
            f"| {'n/a' if m.sd is None else f'{100 * m.sd:.1f} pp'} |"
        )
    return [*lines, ""]


def _arms(report: Report) -> list[str]:
    lines = ["", "## Arms", ""]
    lines += [
        "| arm | n | pass rate [Wilson 95%] | timeouts | tool violations | errors "
        "| tokens/pass | wall s/trial | retries | tool calls |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in report.scores.summaries:
        name = f"{s.arm} (control)" if s.control else s.arm
        lines.append(
            f"| {name} | {s.n} | {_rate(s.pass_rate)} | {_rate(s.timeout_rate)} "
            f"| {_rate(s.tool_violation_rate)} | {_rate(s.error_rate)} "
            f"| {_tokens(s)} | {num(s.wall_s_per_task)} "
            f"| {num(s.retries_mean)} | {num(s.tool_calls_mean)} |"
        )
    return lines


def _errors(report: Report) -> list[str]:
    """Errors excluded and errors as failures, side by side, and the retries."""
    found = report.accountings
    if found is None:
        return []
    lines = ["", "## Infrastructure errors: two accountings", "", INTRO, ""]
    lines += [retried_text(found.retried, found.retried_now), ""]
    lines += [
        "| arm | errors | pass rate, errors excluded | pass rate, errors as failures "
        "| error records retried |",
        "|---|---|---|---|---|",
    ]
    for a in found.arms:
        lines.append(
            f"| {a.arm} | {a.errors} | {_rate(a.excluded)} | {_rate(a.as_failures)} | {a.retried} |"
        )
    return lines


def _tokens(s: ArmSummary) -> str:
    if not s.tokens_metered:
        return "not metered"
    return "n/a (no pass)" if s.tokens_per_pass is None else f"{s.tokens_per_pass:.1f}"


def _cost(report: Report) -> list[str]:
    return cost_markdown(report.cost)


def _stops(report: Report) -> list[str]:
    stopped = [s for s in report.scores.summaries if s.stop_reasons]
    if not stopped:
        return []
    reasons = sorted({r for s in stopped for r in s.stop_reasons})
    lines = ["", "## How model-driven trials ended", ""]
    lines += ["| arm | " + " | ".join(reasons) + " |", "|---|" + "---|" * len(reasons)]
    for s in stopped:
        counts = " | ".join(str(s.stop_reasons.get(r, 0)) for r in reasons)
        lines.append(f"| {s.arm} | {counts} |")
    return lines


def _refusal(report: Report) -> list[str]:
    lines = ["", "## Refusal slice (negative controls)", ""]
    lines += [
        "| arm | abstention accuracy | invalid completions | false abstentions (ordinary) |",
        "|---|---|---|---|",
    ]
    for s in report.scores.summaries:
        lines.append(
            f"| {s.arm} | {_rate(s.abstention_accuracy)} "
            f"| {_rate(s.invalid_completion_rate)} | {_rate(s.false_abstention_rate)} |"
        )
    return lines


def _deltas(report: Report) -> list[str]:
    lines = ["", "## Paired deltas", ""]
    for d in report.scores.deltas:
        lines += [f"### {d.arm} vs {d.control}", ""]
        boot = report.bootstrap.get((d.arm, d.control))
        if boot:
            low, high = boot
            lines += [f"paired bootstrap 95%: {signed_pp(low)} to {signed_pp(high)}", ""]
        lines += [
            f"mean {signed_pp(d.mean)}, sd {num(d.sd, '.3f')}, "
            f"helped {d.helped}, hurt {d.hurt}, same {d.same}, inconclusive {d.inconclusive}",
            "",
            "| task | control | candidate | delta |",
            "|---|---|---|---|",
        ]
        for c in d.cases:
            delta = "inconclusive" if c.delta is None else f"{c.delta:+.2f}"
            lines.append(f"| {c.task_id} | {c.control_status} | {c.candidate_status} | {delta} |")
        lines.append("")
    return lines


def _covariates(report: Report) -> list[str]:
    buckets = report.covariates.get("size_bucket") or {}
    if not buckets:
        return []
    arms_seen = [s.arm for s in report.scores.summaries]
    lines = ["## Covariates: pass rate by size bucket", ""]
    lines += ["| bucket | " + " | ".join(arms_seen) + " |", "|---" * (len(arms_seen) + 1) + "|"]
    for name, by_arm in buckets.items():
        cells = []
        for arm in arms_seen:
            rate = by_arm.get(arm)
            cells.append("—" if rate is None else f"{pct(rate['value'])} ({rate['k']}/{rate['n']})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("")
    return lines


def _legs(report: Report) -> list[str]:
    if not report.legs:
        return []
    lines = ["## Baseline legs (capability on vs off)", ""]
    for d in report.legs:
        # As published in report.json's baseline_legs (rounded), so both files agree.
        ci = "n/a"
        if d.ci95 is not None:
            ci = f"{signed_pp(rounded(d.ci95[0]))} to {signed_pp(rounded(d.ci95[1]))}"
        lines += [
            f"- {d.arm} vs {d.control}: {signed_pp(rounded(d.mean))} (95% CI {ci}), "
            f"n={d.n_tasks} tasks; "
            f"helped {d.helped}, hurt {d.hurt}, same {d.same}, inconclusive {d.inconclusive}"
        ]
    lines.append("")
    return lines


def _outcomes(report: Report) -> list[str]:
    lines = ["## Outcomes per task", ""]
    arms = [s.arm for s in report.scores.summaries]
    lines += ["| task | graded by | " + " | ".join(arms) + " |", "|---" * (len(arms) + 2) + "|"]
    for task_id, by_arm in sorted(report.per_task.items()):
        cells = [", ".join(by_arm.get(arm, ["—"])) for arm in arms]
        how = report.grading.get(task_id, "—")
        lines.append(f"| {task_id} | {how} | " + " | ".join(cells) + " |")
    lines.append("")
    return lines


def _setup(report: Report) -> list[str]:
    if not report.setup_warnings:
        return []
    lines = ["## Setup warnings", ""]
    lines += [f"- {warning}" for warning in report.setup_warnings]
    return [*lines, ""]


def _checklist(report: Report) -> list[str]:
    if not report.rows:
        return []
    lines = ["## Checklist", "", "| | item | detail |", "|---|---|---|"]
    for row in report.rows:
        mark = "yes" if row.ok else "**no**"
        lines.append(f"| {mark} | {row.item} | {row.detail} |")
    lines.append("")
    return lines
