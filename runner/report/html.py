"""``report.html``: the report's JSON form → one self-contained page. Pure.

The page carries its own CSS and draws every plot as inline SVG built here, so
it opens offline from a ``file://`` URL; its Content-Security-Policy forbids
every fetch and every script. Output is deterministic (input order kept, fixed
float formats, no clock), so ``replay`` rebuilds it byte for byte. Every value
from the report is HTML-escaped; a missing value prints ``n/a`` and draws no mark.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from runner.report.accountings import INTRO, retried_text
from runner.report.format import REFUSAL_NOT_MEASURED, cost_line, detectable, method_name, pct
from runner.report.plots import (
    GOOD_OUTCOMES,
    HELPED,
    HURT,
    INCONCLUSIVE,
    SAME,
    as_dict,
    as_interval,
    as_list,
    as_number,
    cost,
    esc,
    fmt_number,
    forest,
    p_value,
    passrates,
    pp_text,
    rate_text,
    strip,
)

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#222;
margin:0 auto;max-width:1120px;padding:16px 24px}
h1{font-size:22px;margin:8px 0}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:8px 0;font-size:13px}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
code,.mono{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px;word-break:break-all}
.stamp{background:#fff3cd;border:1px solid #e0c060;padding:6px 10px;font-weight:600}
.warn{background:#fde2e1;border:1px solid #d6604d;padding:6px 10px}
.verdict{font-weight:700}.ok{color:#1a7f37}.fail{color:#b42318;font-weight:600}
.good{background:#e3f0fa}.bad{background:#fbe5e0}.timeout{background:#fff1c2}
.error{background:#ead9f5}.note{color:#555;font-size:13px}
ul.headline li{margin:4px 0}
svg.plot{display:block;max-width:100%;height:auto;margin:6px 0}
svg.plot text{font:12px system-ui,sans-serif;fill:#222}
svg.plot text.tick,svg.plot text.small{font-size:11px;fill:#555}
svg.plot text.glyph{font-size:13px;font-weight:700;fill:#fff}svg.plot text.dark{fill:#333}
svg.plot text.halo{paint-order:stroke;stroke:#fff;stroke-width:4px;stroke-linejoin:round}
svg.plot line.grid{stroke:#e6e6e6}svg.plot line.axis{stroke:#888}
svg.plot line.zero{stroke:#222;stroke-width:1.5}
"""


# ---------------------------------------------------------------- small helpers


Cell = str | tuple[str, str]  # plain text, or (plain text, CSS class)
_RELATIVE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./-]{0,200}")  # a link that stays beside the page


def _table(head: Sequence[str], rows: Iterable[Sequence[Cell]]) -> str:
    out = ["<table><thead><tr>", *(f"<th>{esc(h)}</th>" for h in head), "</tr></thead><tbody>"]
    for row in rows:
        out.append("<tr>")
        for cell in row:
            text, cls = (cell, "") if isinstance(cell, str) else cell
            out.append(f'<td class="{cls}">{esc(text)}</td>' if cls else f"<td>{esc(text)}</td>")
        out.append("</tr>")
    return "".join([*out, "</tbody></table>"])


# ---------------------------------------------------------------- plots


# ---------------------------------------------------------------- sections


def _verdict(report: dict[str, Any]) -> list[str]:
    if not isinstance(report.get("verdict"), str):
        return []
    rows = [as_dict(r) for r in as_list(report.get("checklist"))]
    failing = "; ".join(str(r.get("item", "?")) for r in rows if r.get("ok") is not True)
    text = f"Verdict: {report['verdict']}" + (f" (failing: {failing})" if failing else "")
    return [f'<p class="verdict">{esc(text)}</p>']


def _header(report: dict[str, Any]) -> list[str]:
    pins = as_dict(report.get("pins"))
    out = [f"<h1>deltarun report: {esc(pins.get('protocol_id', '?'))}</h1>"]
    if report.get("stamp"):
        out.append(f'<p class="stamp">{esc(report["stamp"])}</p>')
    edited = as_dict(report.get("edited"))
    if edited:
        out.append(
            f'<p class="warn">edited after the run: the ledger reported as '
            f"<code>{esc(edited.get('reported_ledger_sha256'))}</code> now has digest "
            f"<code>{esc(edited.get('ledger_sha256'))}</code> (accepted with --accept-edits)</p>"
        )
    return [*out, *_verdict(report)]


def _pins(report: dict[str, Any]) -> list[str]:
    """The pins table, after the headline: the suite digest first."""
    pins = as_dict(report.get("pins"))
    rows: list[Sequence[Cell]] = []
    names = {
        "suite_sha256": "suite sha256", "validation_sha256": "validation sha256",
        "excluded": "excluded tasks", "protocol_id": "protocol id",
        "protocol_sha256": "protocol sha256", "channel": "channel", "run_id": "run id",
        "timeout_s": "timeout s", "seed": "seed", "routes": "route of",
        "control_arm": "control arm", "ledger_sha256": "ledger sha256",
        "image_digests": "image", "agent_dir_digests": "agent dir of",
        "agent_artifacts": "agent of", "baseline_modes": "baseline mode of",
        "oci_runtime": "OCI runtime",
        "deltarun_version": "deltarun version", "python_version": "Python version",
        "builtin_metrics_sha256": "built-in metrics (runner/grading/metrics.py) sha256",
    }  # fmt: skip
    for key in [*names, *sorted(k for k in pins if k not in names)]:
        if pins.get(key) in (None, "", {}, []):
            continue
        value = pins[key]
        if isinstance(value, list):
            rows.append((names.get(key, key), ", ".join(str(v) for v in value)))
        elif isinstance(value, dict):
            rows += [
                (f"{names.get(key, key)} {k}", (_pin_text(v), "mono")) for k, v in value.items()
            ]
        else:
            rows.append((names.get(key, key), (str(value), "mono")))
    return ["<h2>Pins</h2>", _table(("pin", "value"), rows)]


def _pin_text(value: Any) -> str:
    """A pin's value; a route as "model at base_url, temperature t"."""
    if isinstance(value, dict) and "model" in value:
        return (
            f"{value.get('model')} at {value.get('base_url')}, "
            f"temperature {value.get('temperature')}"
        )
    if isinstance(value, dict) and "agent" in value:
        return f"{value.get('agent')} artifacts {value.get('artifacts_sha256') or 'not pinned'}"
    return str(value)


def _headline(report: dict[str, Any], deltas: list[dict[str, Any]]) -> list[str]:
    out = ["<h2>Headline</h2>"]
    if report.get("headline_withheld") is True:
        instead = [as_dict(x) for x in as_list(report.get("publish_instead"))]
        return [
            *out,
            '<p class="warn">Withheld: two or more checklist rows fail (see the checklist). '
            "The comparison's numbers are at the end, for the author, not for publication. "
            "What may be published instead (seed 004's decision table):</p>",
            "<ul>",
            *(f"<li>{esc(x.get('row', '?'))}: {esc(x.get('publish', '?'))}</li>" for x in instead),
            "</ul>",
        ]
    items = []
    listed = report.get("arms")
    arms = (
        {a.get("arm"): a for a in listed if isinstance(a, dict)} if isinstance(listed, list) else {}
    )
    for d in deltas:
        agg, ctrl = as_dict(d.get("aggregate_delta")), d.get("control_arm")
        mean = as_number(agg.get("mean"))
        name = (
            f"<b>{esc(d.get('candidate_arm', '?'))}</b> vs <b>{esc(d.get('control_arm', '?'))}</b>"
        )
        if mean is None:
            items.append(
                f"<li>{name}: no paired tasks (inconclusive {esc(agg.get('inconclusive', 0))})</li>"
            )
            continue
        counts = ", ".join(f"{c} {agg.get(c, 0)}" for c in (HELPED, HURT, SAME, INCONCLUSIVE))
        items.append(
            f"<li>{name}: {esc(pp_text(mean))} pp pass rate ({esc(_ci_text(agg))}), "
            f"n = {esc(agg.get('n_tasks', 0))} tasks, McNemar p = "
            f"{esc(p_value(agg.get('mcnemar_p')))}, {esc(detectable(as_number(agg.get('mde'))))}; "
            f"{esc(counts)}"
            f"<br>{esc(_refusal_text(d.get('refusal_delta')))}"
            f"<br>{esc(_cost_text(arms.get(d.get('candidate_arm')), arms.get(ctrl)))}</li>"
        )
    return [*out, '<ul class="headline">', *(items or ["<li>no candidate arm</li>"]), "</ul>"]


def _ci_text(agg: dict[str, Any]) -> str:
    ci = as_interval(agg.get("ci95"))
    if ci is None:
        return "95% CI n/a"
    return f"95% CI {pp_text(ci[0])} to {pp_text(ci[1])} pp, {method_name(agg.get('ci_method'))}"


def _refusal_text(value: Any) -> str:
    refusal = as_dict(value)
    mean = as_number(refusal.get("mean"))
    if mean is None:
        return REFUSAL_NOT_MEASURED
    return (
        f"refusal slice: {pp_text(mean)} pp abstention accuracy ({_ci_text(refusal)}), "
        f"n = {refusal.get('n_tasks', 0)} negative tasks"
    )


def _cost_text(candidate: Any, control: Any) -> str:
    cand, ctrl = as_dict(candidate), as_dict(control)
    return cost_line(
        as_number(cand.get("tokens_per_pass")),
        as_number(ctrl.get("tokens_per_pass")),
        as_number(cand.get("wall_s_per_task")),
        as_number(ctrl.get("wall_s_per_task")),
        (cand.get("tokens_metered") is not False, ctrl.get("tokens_metered") is not False),
    )


def _outcome_class(outcomes: list[str]) -> str:
    if "error" in outcomes:
        return "error"
    if "timeout" in outcomes:
        return "timeout"
    return "good" if all(o in GOOD_OUTCOMES for o in outcomes) else "bad"


def _tables(report: dict[str, Any], arms: list[dict[str, Any]]) -> list[str]:
    def name(arm: dict[str, Any]) -> str:
        return f"{arm.get('arm', '?')}{' (control)' if arm.get('control') is True else ''}"

    rates = ("pass_rate", "timeout_rate", "tool_violation_rate", "error_rate")
    rows: list[list[Cell]] = []
    for a in arms:
        rows.append([name(a), (str(a.get("n", "n/a")), "num")])
        rows[-1] += [rate_text(a.get(k)) for k in rates]
        tokens = fmt_number(a.get("tokens_per_pass"), ".1f")
        if a.get("tokens_metered") is False:
            tokens = "not metered"
        elif a.get("tokens_per_pass") is None:
            tokens = "n/a (no pass)"
        rows[-1] += [(tokens, "num")]
        rows[-1] += [(fmt_number(a.get("wall_s_per_task")), "num")]
    head = ["arm", "n", "pass rate [Wilson 95%]", "timeouts", "tool violations", "errors"]
    out = ["<h2>Arms</h2>", _table([*head, "tokens/pass", "wall s/task"], rows)]
    out += _accountings(as_dict(report.get("accountings")))
    head = ["arm", "abstention accuracy", "invalid completions", "false abstentions (ordinary)"]
    keys = ("abstention_accuracy", "invalid_completion_rate", "false_abstention_rate")
    rows = [[name(a), *(rate_text(as_dict(a.get("refusal")).get(k)) for k in keys)] for a in arms]
    return [*out, "<h2>Refusal slice (negative controls)</h2>", _table(head, rows)]


def _accountings(found: dict[str, Any]) -> list[str]:
    """``accountings``: errors excluded and errors as failures, side by side, and retries."""
    if not found:
        return []
    rows: list[list[Cell]] = []
    for a in (as_dict(x) for x in as_list(found.get("arms"))):
        rows.append([str(a.get("arm", "?")), (str(a.get("errors", "n/a")), "num")])
        rows[-1] += [rate_text(a.get("errors_excluded")), rate_text(a.get("errors_as_failures"))]
        rows[-1] += [(str(a.get("retried", "n/a")), "num")]
    retried = as_number(found.get("retried"))
    now = as_dict(found.get("retried_now"))
    now = {str(k): v for k, v in now.items() if isinstance(v, int)}
    head = ("arm", "errors", "errors excluded", "errors as failures", "retried")
    return [
        "<h2>Infrastructure errors: two accountings</h2>",
        f'<p class="note">{esc(INTRO)} {esc(retried_text(int(retried or 0), now))}</p>',
        _table(head, rows),
    ]


def _run_tables(report: dict[str, Any], arms: list[dict[str, Any]]) -> list[str]:
    """Outcomes per task, setup warnings and the checklist: no number of the comparison."""
    out: list[str] = []
    per_task = as_dict(report.get("per_task"))
    names = [str(a.get("arm", "?")) for a in arms]
    names += sorted({str(arm) for by in per_task.values() for arm in as_dict(by)} - set(names))
    rows = []
    for task in sorted(per_task):
        by_arm = as_dict(per_task[task])
        row: list[Cell] = [str(task)]
        for arm in names:
            outcomes = [str(o) for o in as_list(by_arm.get(arm))]
            row.append((", ".join(outcomes), _outcome_class(outcomes)) if outcomes else "—")
        rows.append(row)
    out += ["<h2>Outcomes per task</h2>", _table(("task", *names), rows)]
    warnings = [str(w) for w in as_list(report.get("setup_warnings"))]
    if warnings:
        out += ["<h2>Setup warnings</h2>", "<ul>", *(f"<li>{esc(w)}</li>" for w in warnings)]
        out.append("</ul>")
    checklist = [as_dict(r) for r in as_list(report.get("checklist"))]
    if checklist:
        out += ["<h2>Checklist</h2>", *_verdict(report)]
        rows = []
        for r in checklist:
            mark: Cell = ("yes", "ok") if r.get("ok") is True else ("no", "fail")
            rows.append([mark, str(r.get("item", "")), str(r.get("detail", ""))])
        out.append(_table(("ok", "item", "detail"), rows))
    return out


def _metric_table(report: dict[str, Any]) -> list[str]:
    """Each answer-task metric on its own (``metric_deltas``), with its module and digest."""
    rows: list[list[Cell]] = []
    for m in (as_dict(x) for x in as_list(report.get("metric_deltas"))):
        sd = as_number(m.get("sd"))
        rows.append(
            [
                f"{m.get('candidate_arm', '?')} vs {m.get('control_arm', '?')}",
                (str(m.get("metric", "?")), "mono"),
                (f"{m.get('module', '?')} {str(m.get('sha256') or 'not recorded')[:12]}", "mono"),
                (str(m.get("n_tasks", "n/a")), "num"),
                (pct(as_number(m.get("control"))), "num"),
                (pct(as_number(m.get("candidate"))), "num"),
                (f"{pp_text(as_number(m.get('delta')))} pp", "num"),
                ("n/a" if sd is None else f"{100 * sd:.1f} pp", "num"),
            ]
        )
    if not rows:
        return []
    head = ("candidate vs control", "metric", "module", "n tasks", "control", "candidate")
    return ["<h2>Answer metrics</h2>", _table([*head, "delta", "sd"], rows)]


def _viewer_link(folder: str) -> list[str]:
    """A line linking the run viewer's bundle in ``folder`` (beside report.html), and how to
    write it; none unless ``folder`` is a plain relative path (run.json can be edited)."""
    if not _RELATIVE.fullmatch(folder) or ".." in folder.split("/"):
        return []
    page = esc(f"{folder}/index.html")
    return [
        f'<p class="note">Trial by trial (patches, test logs, agent steps): <a href="{page}">'
        f"{page}</a>, written with this report (again: <code>deltarun view RUN --bundle "
        f"RUN/{esc(folder)}</code>); or serve it with <code>deltarun view RUN</code>.</p>"
    ]


def render_html(report: dict[str, Any], viewer: str = "") -> str:
    """The whole report as one self-contained, deterministic HTML page, drawn from the
    report's JSON form (``jsonform.to_json``) so it shows exactly the published numbers;
    a withheld report's numbers come last, under a banner saying they are not to publish.
    ``viewer``: the viewer bundle's folder beside report.html, linked under the verdict
    ("": no link, as in runs recorded before run.json named one)."""
    title = f"deltarun report: {as_dict(report.get('pins')).get('protocol_id', '?')}"
    csp = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
    held = as_dict(report.get("withheld_for_author"))
    shown = {**report, **held} if held else report
    arms = [as_dict(a) for a in as_list(shown.get("arms"))]
    deltas = [as_dict(d) for d in as_list(shown.get("deltas"))]
    numbers = [
        "<h2>Paired deltas (forest plot)</h2>",
        '<p class="note">Each dot is the mean per-task difference in pass rate, candidate minus '
        "control; the line is its 95% interval. Blue: the interval excludes zero upwards; red: "
        "downwards.</p>",
        forest(deltas),
        "<h2>Pass rates</h2>",
        passrates(arms),
        "<h2>Per-task helped / hurt</h2>",
        '<p class="note">Columns are tasks in name order, the same column in every row; hover a '
        "cell for the task and both statuses.</p>",
        strip(deltas),
        "<h2>Cost against pass rate</h2>",
        cost(arms),
        *_budget_ending(shown),
    ]
    run_tables = _run_tables(report, arms)
    if held:
        banner = (
            '<h2 class="warn">Withheld numbers: for the author, not for publication</h2>'
            f'<p class="warn">{esc(held.get("note", ""))}</p>'
        )
        body = [*run_tables, banner, *numbers, *_tables(shown, arms), *_metric_table(shown)]
    else:
        body = [*numbers, *_tables(shown, arms), *run_tables, *_metric_table(shown)]
    parts = [
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>",
        *_header(report),
        *_viewer_link(viewer),
        *_headline(report, deltas),
        *_pins(report),
        *body,
        "</body></html>\n",
    ]
    return "\n".join(parts)


def _budget_ending(report: dict[str, Any]) -> list[str]:
    """The sentence on how the run's budget ended the run, when it did."""
    ending = as_dict(as_dict(report.get("cost")).get("run_budget_ending"))
    text = ending.get("text")
    return [f'<p class="warn">{esc(text)}</p>'] if isinstance(text, str) else []
