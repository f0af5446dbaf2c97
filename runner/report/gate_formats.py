"""A gate decision in the forms CI reads: terminal lines, ``decision.json``, JUnit XML and a
Markdown summary sized for a pull-request comment. Pure: text in, text out.

JUnit follows the schema Jenkins, GitLab and GitHub's test reporters accept (Jenkins'
``junit-10.xsd``): ``testsuites`` > ``testsuite`` (``name``, ``tests``, ``failures``,
``errors``, ``skipped``; ``properties`` first) > ``testcase`` (``classname``, ``name``,
``time``) with at most one ``failure`` or ``skipped`` child. One suite holds the
preconditions and one suite each gated arm, whose ``helped`` and ``hurt`` task ids are the
suite's properties (the schema allows properties on a suite, not on a test case). A failed
criterion is a ``failure``, an undecided or missing one ``skipped``, each with its numbers
in ``message``.
"""

from __future__ import annotations

import json
import math
from typing import Any
from xml.etree import ElementTree as ET

from runner.report.gate_decision import PRECONDITION, Criterion, GateDecision, Verdict

SCHEMA = "deltarun.decision/1"
SHOWN_TASKS = 10  # task ids a summary lists per arm and side before "and N more"
OVERALL_WORDS = {Verdict.PASS: "PASS", Verdict.FAIL: "FAIL", Verdict.UNDECIDED: "NOT DECIDED"}


def _num(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "n/a"
    if math.isinf(value):
        return "inf"
    return f"{value:+.3f}" if signed else f"{value:.3f}"


def numbers(c: Criterion) -> str:
    """The criterion's numbers as one phrase."""
    if c.name == PRECONDITION:
        return f"{c.row} ({c.detail})"
    signed = c.name.endswith("superiority") or c.name.endswith("inferiority")
    parts = [f"estimate {_num(c.estimate, signed)}"]
    if c.low is not None and c.high is not None:
        label = "repeated" if c.detail.startswith("repeated interval") else "95%"
        parts.append(f"{label} [{_num(c.low, signed)}, {_num(c.high, signed)}]")
    bound = "above" if signed else "at most"
    parts.append(f"{bound} {_num(c.threshold, signed)}")
    if c.n:
        parts.append(f"n={c.n}")
    if c.detail:
        parts.append(c.detail)
    return ", ".join(parts)


def lines(decision: GateDecision) -> list[str]:
    """One line per criterion (the preconditions as one line when all hold), then the
    decision."""
    out: list[str] = []
    pre = [c for c in decision.criteria if c.name == PRECONDITION]
    if pre and all(c.verdict is Verdict.PASS for c in pre):
        out.append(f"pass       preconditions: {len(pre)} of {len(pre)} hold")
    else:
        out += [f"{c.verdict.value:<10} precondition: {numbers(c)}" for c in pre]
    for c in decision.criteria:
        if c.name != PRECONDITION:
            out.append(f"{c.verdict.value:<10} {c.name} {c.arm}: {numbers(c)}")
    if decision.stop is not None:
        out.append(decision.stop.line())
    overall = decision.overall
    out.append(f"gate: {OVERALL_WORDS[overall]} (exit {decision.exit_code})")
    return out


def _finite(value: float | None) -> float | str | None:
    if value is not None and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def decision_json(decision: GateDecision, head: dict[str, Any]) -> str:
    """``decision.json``: ``head`` (run, protocol, criteria source and spec) then the
    criteria, their numbers and the exit code; sorted keys, so a replay is byte for byte."""
    data = {
        **head,
        "schema": SCHEMA,
        "decision": decision.overall.value,
        "exit_code": decision.exit_code,
        "criteria": [
            {
                "name": c.name,
                "arm": c.arm,
                "verdict": c.verdict.value,
                "threshold": _finite(c.threshold),
                "estimate": _finite(c.estimate),
                "ci95": None if c.low is None or c.high is None else [c.low, c.high],
                "n": c.n,
                "detail": c.detail,
                "row": c.row,
            }
            for c in decision.criteria
        ],
        "tasks": {t.arm: {"helped": list(t.helped), "hurt": list(t.hurt)} for t in decision.tasks},
    }
    stop = decision.stop
    if stop is not None:  # only a sequential run's decision has it: older files keep their bytes
        data["sequential"] = {
            "look": stop.look.number,
            "planned_looks": stop.planned,
            "stopped_early": stop.early,
            "boundary": _finite(stop.look.bound),
            "spending": stop.spending,
            "tasks_spent": stop.look.tasks_done,
            "tasks_total": stop.tasks_total,
            "trials_spent": stop.trials_spent,
            "trials_saved": stop.trials_total - stop.trials_spent,
            "line": stop.line(),
        }
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def junit_xml(decision: GateDecision, run_id: str) -> str:
    """JUnit XML: a suite of preconditions and one suite per gated arm (module docstring)."""
    root = ET.Element("testsuites", name=f"deltarun gate {run_id}")
    suites: dict[str, list[Criterion]] = {}
    for c in decision.criteria:
        suites.setdefault(c.arm or "preconditions", []).append(c)
    tasks = {t.arm: t for t in decision.tasks}
    totals = {"tests": 0, "failures": 0, "skipped": 0}
    for name, found in suites.items():
        failures = sum(c.verdict is Verdict.FAIL for c in found)
        skipped = sum(c.verdict in (Verdict.UNDECIDED, Verdict.MISSING) for c in found)
        suite = ET.SubElement(
            root,
            "testsuite",
            name=name,
            tests=str(len(found)),
            failures=str(failures),
            errors="0",
            skipped=str(skipped),
        )
        if name in tasks:
            props = ET.SubElement(suite, "properties")
            ET.SubElement(props, "property", name="helped", value=" ".join(tasks[name].helped))
            ET.SubElement(props, "property", name="hurt", value=" ".join(tasks[name].hurt))
        for c in found:
            case = ET.SubElement(
                suite,
                "testcase",
                classname=f"deltarun.gate.{name}",
                name=c.row if c.name == PRECONDITION else c.name,
                time="0",
            )
            message = f"{c.verdict.value}: {numbers(c)}"
            if c.verdict is Verdict.FAIL:
                ET.SubElement(case, "failure", message=message, type="fail").text = message
            elif c.verdict is not Verdict.PASS:
                ET.SubElement(case, "skipped", message=message)
            ET.SubElement(case, "system-out").text = message
        totals["tests"] += len(found)
        totals["failures"] += failures
        totals["skipped"] += skipped
    root.set("tests", str(totals["tests"]))
    root.set("failures", str(totals["failures"]))
    root.set("errors", "0")
    root.set("skipped", str(totals["skipped"]))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, "unicode") + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _listed(ids: tuple[str, ...]) -> str:
    shown = ", ".join(f"`{i}`" for i in ids[:SHOWN_TASKS])
    more = len(ids) - SHOWN_TASKS
    return (shown + (f" and {more} more" if more > 0 else "")) or "none"


def _interval_head(decision: GateDecision) -> str:
    return "interval" if decision.stop is not None else "95% interval"


def summary_markdown(decision: GateDecision, run_id: str, protocol: str, source: str) -> str:
    """A Markdown summary for a pull-request comment or ``$GITHUB_STEP_SUMMARY``: the
    decision, a table of criteria, the helped and hurt tasks of each arm."""
    overall = decision.overall
    out = [
        f"### deltarun gate: {OVERALL_WORDS[overall]} (exit {decision.exit_code})",
        "",
        f"Run `{run_id}`, protocol `{protocol[:12]}`, criteria from {source}.",
        *(["", _cell(decision.stop.line())] if decision.stop is not None else []),
        "",
        f"| criterion | arm | verdict | estimate | {_interval_head(decision)} | threshold | n |",
        "|---|---|---|---|---|---|---|",
    ]
    pre = [c for c in decision.criteria if c.name == PRECONDITION]
    held = [c for c in pre if c.verdict is Verdict.PASS]
    if held:
        out.append(f"| preconditions | | pass | {len(held)} of {len(pre)} hold | | | |")
    for c in pre:
        if c.verdict is not Verdict.PASS:
            out.append(f"| precondition | | **{c.verdict.value}** | {_cell(numbers(c))} | | | |")
    for c in decision.criteria:
        if c.name == PRECONDITION:
            continue
        signed = c.name.endswith("superiority") or c.name.endswith("inferiority")
        interval = (
            ""
            if c.low is None or c.high is None
            else f"[{_num(c.low, True)}, {_num(c.high, True)}]"
        )
        verdict = c.verdict.value if c.verdict is Verdict.PASS else f"**{c.verdict.value}**"
        estimate = _num(c.estimate, signed) if c.estimate is not None else _cell(c.detail)
        out.append(
            f"| {c.name} | {_cell(c.arm)} | {verdict} | {estimate} | {interval} "
            f"| {_num(c.threshold, signed)} | {c.n or ''} |"
        )
    out.append("")
    for t in decision.tasks:
        out.append(
            f"**{_cell(t.arm)}** helped {len(t.helped)}: {_listed(t.helped)}; "
            f"hurt {len(t.hurt)}: {_listed(t.hurt)}"
        )
    return "\n".join(out).rstrip() + "\n"
