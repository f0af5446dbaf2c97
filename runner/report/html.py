"""``report.html``: the report's JSON form → one self-contained page. Pure.

The page carries its own CSS and draws every plot as inline SVG built here, so
it opens offline from a ``file://`` URL; its Content-Security-Policy forbids
every fetch and every script. Output is deterministic (input order kept, fixed
float formats, no clock), so ``replay`` rebuilds it byte for byte. Every value
from the report is HTML-escaped; a missing value prints ``n/a`` and draws no mark.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from html import escape
from typing import Any

from runner.report.format import pct

HELPED, HURT, SAME, INCONCLUSIVE = "helped", "hurt", "same", "inconclusive"
COLOURS = {HELPED: "#2166ac", HURT: "#d6604d", SAME: "#d9d9d9", INCONCLUSIVE: "#fee08b"}
GLYPHS = {HELPED: "+", HURT: "−", SAME: "=", INCONCLUSIVE: "?"}
CONTROL_COLOUR, ARM_COLOUR, NEUTRAL = "#8c8c8c", "#4575b4", "#333333"
GOOD_OUTCOMES = {"success", "abstain_ok"}
WIDTH = 1060.0  # every plot is this wide, the width of the page
LABEL_CHARS = 34  # plot labels longer than this are cut, the full text goes in a <title>

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


def _e(value: Any) -> str:
    return escape(str(value), quote=True)


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _interval(value: Any) -> tuple[float, float] | None:
    if isinstance(value, list | tuple) and len(value) == 2:
        lo, hi = _num(value[0]), _num(value[1])
        if lo is not None and hi is not None:
            return lo, hi
    return None


def _f(value: float) -> str:
    """An SVG coordinate."""
    return f"{value:.1f}"


def _pp(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:+.1f}"


def _fmt(value: Any, spec: str = ".2f") -> str:
    number = _num(value)
    return "n/a" if number is None else format(number, spec)


def _p(value: Any) -> str:
    return _fmt(value, ".4g")


def _text(
    x: float, y: float, text: str, anchor: str = "start", cls: str = "", cut: int = 80
) -> str:
    """A plot label; one longer than ``cut`` is cut and keeps its full text as a tooltip."""
    attr = f' class="{cls}"' if cls else ""
    tip = f"<title>{_e(text)}</title>" if len(text) > cut else ""
    short = text if len(text) <= cut else text[: cut - 1] + "…"
    return f'<text{attr} x="{_f(x)}" y="{_f(y)}" text-anchor="{anchor}">{tip}{_e(short)}</text>'


def _line(x1: float, y1: float, x2: float, y2: float, attrs: str) -> str:
    return f'<line x1="{_f(x1)}" y1="{_f(y1)}" x2="{_f(x2)}" y2="{_f(y2)}" {attrs}/>'


def _whisker(a: float, b: float, y: float, colour: str, width: float) -> list[str]:
    """A horizontal interval from a to b at height y, with end caps."""
    style = f'stroke="{colour}" stroke-width="{width}"'
    return [
        _line(a, y, b, y, style),
        _line(a, y - 6, a, y + 6, style),
        _line(b, y - 6, b, y + 6, style),
    ]


def _svg(cls: str, width: float, height: float, label: str, body: Iterable[str]) -> str:
    return (
        f'<svg class="plot {cls}" role="img" aria-label="{_e(label)}" width="{_f(width)}" '
        f'height="{_f(height)}" viewBox="0 0 {_f(width)} {_f(height)}">' + "".join(body) + "</svg>"
    )


def _scale(value: float, lo: float, hi: float, a: float, b: float) -> float:
    value = min(max(value, lo), hi)
    return a + (value - lo) / (hi - lo) * (b - a)


def _rate(rate: Any) -> tuple[float | None, tuple[float, float] | None]:
    r = _dict(rate)
    return _num(r.get("value")), _interval(r.get("wilson95"))


def _rate_text(rate: Any) -> str:
    r = _dict(rate)
    value, ci = _rate(r)
    if value is None or ci is None:
        return f"n/a (n={r.get('n', 0)})"
    return f"{pct(value)} [{pct(ci[0])}, {pct(ci[1])}] ({r.get('k')}/{r.get('n')})"


Cell = str | tuple[str, str]  # plain text, or (plain text, CSS class)


def _table(head: Sequence[str], rows: Iterable[Sequence[Cell]]) -> str:
    out = ["<table><thead><tr>", *(f"<th>{_e(h)}</th>" for h in head), "</tr></thead><tbody>"]
    for row in rows:
        out.append("<tr>")
        for cell in row:
            text, cls = (cell, "") if isinstance(cell, str) else cell
            out.append(f'<td class="{cls}">{_e(text)}</td>' if cls else f"<td>{_e(text)}</td>")
        out.append("</tr>")
    return "".join([*out, "</tbody></table>"])


def _category(delta: float | None) -> str:
    if delta is None:
        return INCONCLUSIVE
    return HELPED if delta > 0 else HURT if delta < 0 else SAME


def _delta_name(d: dict[str, Any]) -> str:
    return f"{d.get('candidate_arm', '?')} vs {d.get('control_arm', '?')}"


# ---------------------------------------------------------------- plots


def _axis_x(
    ticks: Sequence[tuple[float, str]], top: float, bottom: float, zero: float
) -> list[str]:
    """Vertical grid lines at the given x positions, their labels under the plot."""
    out = []
    for x, text in ticks:
        out.append(_line(x, top, x, bottom, f'class="{"zero" if x == zero else "grid"}"'))
        out.append(_text(x, bottom + 16, text, "middle", "tick"))
    return out


def _forest(deltas: list[dict[str, Any]]) -> str:
    """One row per delta: the mean (dot) and its 95% interval (line), in pp, -100..+100."""
    left, right, top, row = 240.0, 720.0, 30.0, 32.0
    bottom = top + row * max(1, len(deltas))
    ticks = [
        (_scale(t, -100, 100, left, right), f"{t:+d}" if t else "0") for t in range(-100, 101, 25)
    ]
    body = [
        _text(right + 14, 18, "mean pp [95% CI] · n tasks · McNemar p", cls="small"),
        *_axis_x(ticks, top - 8, bottom, (left + right) / 2),
        _line(left, bottom, right, bottom, 'class="axis"'),
        _text((left + right) / 2, bottom + 34, "candidate − control, percentage points", "middle"),
        _text(left, bottom + 34, "← hurt", cls="small"),
        _text(right, bottom + 34, "helped →", "end", "small"),
    ]
    for i, d in enumerate(deltas):
        agg = _dict(d.get("aggregate_delta"))
        mean, ci = _num(agg.get("mean")), _interval(agg.get("ci95"))
        y = top + row * i + row / 2
        body.append(_text(left - 10, y + 4, _delta_name(d), "end", cut=LABEL_CHARS))
        colour = NEUTRAL
        if ci is not None:
            colour = COLOURS[HELPED] if ci[0] > 0 else COLOURS[HURT] if ci[1] < 0 else NEUTRAL
            x0, x1 = _scale(ci[0], -1, 1, left, right), _scale(ci[1], -1, 1, left, right)
            body += _whisker(x0, x1, y, colour, 2.5)
        if mean is None:
            text = f"n/a: no paired tasks (inconclusive {agg.get('inconclusive', 0)})"
        else:
            x = _scale(mean, -1, 1, left, right)
            body.append(f'<circle cx="{_f(x)}" cy="{_f(y)}" r="6" fill="{colour}" stroke="#fff"/>')
            ci_text = "n/a" if ci is None else f"{_pp(ci[0])}, {_pp(ci[1])}"
            n, p = agg.get("n_tasks", 0), _p(agg.get("mcnemar_p"))
            text = f"{_pp(mean)} [{ci_text}] · n={n} · p={p}"
        body.append(_text(right + 14, y + 4, text))
    label = "Forest plot: each candidate's paired pass-rate delta against its control, with 95% CI"
    return _svg("forest", WIDTH, bottom + 46, label, body)


def _passrates(arms: list[dict[str, Any]]) -> str:
    """One bar per arm (0..100%), the Wilson 95% interval as an error bar; control in grey."""
    left, right, top, row = 240.0, 720.0, 30.0, 30.0
    bottom = top + row * max(1, len(arms))
    ticks = [(_scale(t, 0, 100, left, right), f"{t}%") for t in range(0, 101, 20)]
    body = [
        _text(right + 14, 18, "pass rate [Wilson 95%] (k/n)", cls="small"),
        *_axis_x(ticks, top - 8, bottom, -1),
        _line(left, top - 8, left, bottom, 'class="axis"'),
    ]
    for arm in arms:  # the control's rate as a dashed reference line across every row
        value = _rate(arm.get("pass_rate"))[0]
        if arm.get("control") is True and value is not None:
            x = _scale(value, 0, 1, left, right)
            body.append(
                _line(x, top - 8, x, bottom, f'stroke="{CONTROL_COLOUR}" stroke-dasharray="4 3"')
            )
    for i, arm in enumerate(arms):
        y = top + row * i + row / 2
        control = arm.get("control") is True
        body.append(
            _text(
                left - 10,
                y + 4,
                f"{arm.get('arm', '?')}{' (control)' * control}",
                "end",
                cut=LABEL_CHARS,
            )
        )
        value, ci = _rate(arm.get("pass_rate"))
        if value is not None and ci is not None:
            width = max(_scale(value, 0, 1, left, right) - left, 1.5)
            body.append(
                f'<rect x="{_f(left)}" y="{_f(y - 8)}" width="{_f(width)}" height="16" '
                f'fill="{CONTROL_COLOUR if control else ARM_COLOUR}" fill-opacity="0.75"/>'
            )
            body += _whisker(
                _scale(ci[0], 0, 1, left, right), _scale(ci[1], 0, 1, left, right), y, "#111", 1.5
            )
        body.append(_text(right + 14, y + 4, _rate_text(arm.get("pass_rate"))))
    label = "Pass rate of each arm with its Wilson 95% interval; the control is grey and dashed"
    return _svg("passrates", WIDTH, bottom + 28, label, body)


def _strip(deltas: list[dict[str, Any]]) -> str:
    """Per delta, one cell per task (same column = same task), coloured by its paired outcome."""
    cases = [
        {str(c.get("case_id")): c for c in map(_dict, _list(d.get("per_case")))} for d in deltas
    ]
    tasks = sorted({task for by_task in cases for task in by_task})
    left, width = 240.0, WIDTH - 260.0
    pitch = float(max(16, min(36, int(width) // max(1, len(tasks)))))
    per_line = max(1, int(width // pitch))
    block = max(math.ceil(len(tasks) / per_line) * pitch, 34.0) + 12
    body: list[str] = []
    for j, cat in enumerate((HELPED, HURT, SAME, INCONCLUSIVE)):
        x = left + 150 * j
        body.append(f'<rect x="{_f(x)}" y="6" width="14" height="14" fill="{COLOURS[cat]}"/>')
        body.append(_text(x + 20, 18, f"{cat} ({GLYPHS[cat]})"))
    top, size = 34.0, _f(pitch - 2)
    for i, (d, by_task) in enumerate(zip(deltas, cases, strict=True)):
        y0 = top + block * i
        agg = _dict(d.get("aggregate_delta"))
        counts = f"+{agg.get(HELPED, 0)} −{agg.get(HURT, 0)} ={agg.get(SAME, 0)}"
        counts += f" ?{agg.get(INCONCLUSIVE, 0)}" if agg.get(INCONCLUSIVE) else ""
        body += [
            _text(left - 10, y0 + 13, _delta_name(d), "end", cut=LABEL_CHARS),
            _text(left - 10, y0 + 28, counts, "end", "small"),
        ]
        for k, task in enumerate(tasks):
            x, y = left + pitch * (k % per_line), y0 + pitch * (k // per_line)
            case = by_task.get(task)
            if case is None:  # a task this delta never saw: an empty outline, named
                body.append(
                    f'<rect x="{_f(x)}" y="{_f(y)}" width="{size}" height="{size}" fill="none" '
                    f'stroke="#bbb"><title>{_e(task)}: absent</title></rect>'
                )
                continue
            delta = _num(case.get("delta"))
            cat = _category(delta)
            tip = (
                f"{task}: {cat}; control {case.get('control_status', '?')} → candidate "
                f"{case.get('candidate_status', '?')}; delta {_fmt(delta, '+.2f')}"
            )
            body.append(
                f'<rect x="{_f(x)}" y="{_f(y)}" width="{size}" height="{size}" '
                f'fill="{COLOURS[cat]}"><title>{_e(tip)}</title></rect>'
            )
            if cat != SAME and pitch >= 20:  # glyphs for colour-blind readers; "same" stays plain
                cls = "glyph dark" if cat == INCONCLUSIVE else "glyph"
                body.append(_text(x + pitch / 2 - 1, y + pitch / 2 + 4, GLYPHS[cat], "middle", cls))
    label = "Per-task strip: for each delta, one cell per task, helped, hurt, same or inconclusive"
    return _svg("strip", WIDTH, top + block * max(1, len(deltas)), label, body)


def _ticks(high: float) -> tuple[float, float]:
    """An axis end ≥ high and a step of 1, 2 or 5 × 10^k, for about five ticks."""
    if high <= 0:
        return 1.0, 0.2
    raw = high / 5
    mag = 10.0 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    return step * math.ceil(high / step - 1e-9), step


def _cost(arms: list[dict[str, Any]]) -> str:
    """Arms as points: wall time per task (or tokens per pass) against pass rate, Wilson bars."""
    rated = [a for a in arms if _rate(a.get("pass_rate"))[0] is not None]
    tokens = [_num(a.get("tokens_per_pass")) for a in rated]
    use_tokens = bool(rated) and all(t is not None for t in tokens) and any(tokens)
    key = "tokens_per_pass" if use_tokens else "wall_s_per_task"
    title = "tokens per pass" if use_tokens else "wall seconds per task"
    points, missing = [], []
    for arm in arms:
        x, (y, ci) = _num(arm.get(key)), _rate(arm.get("pass_rate"))
        if x is not None and y is not None:
            points.append((x, y, ci, str(arm.get("arm", "?")), arm.get("control") is True))
        else:
            missing.append(str(arm.get("arm", "?")))
    left, right, top, bottom = 70.0, 700.0, 20.0, 300.0
    xmax, step = _ticks(max((p[0] for p in points), default=0.0) * 1.1)
    ticks = [
        (_scale(i * step, 0, xmax, left, right), f"{i * step:g}")
        for i in range(round(xmax / step) + 1)
    ]
    body = _axis_x(ticks, top, bottom, -1)
    for tick in range(0, 101, 20):
        y = _scale(tick, 0, 100, bottom, top)
        body += [
            _line(left, y, right, y, 'class="grid"'),
            _text(left - 6, y + 4, f"{tick}%", "end", "tick"),
        ]
    middle = _f((top + bottom) / 2)
    body += [
        _line(left, bottom, right, bottom, 'class="axis"'),
        _text((left + right) / 2, bottom + 36, f"{title} (lower is cheaper)", "middle"),
        f'<text x="16" y="{middle}" text-anchor="middle" transform="rotate(-90 16 {middle})">'
        "pass rate</text>",
    ]
    placed: list[tuple[float, float]] = []
    for x_val, y_val, ci, name, control in sorted(points, key=lambda p: (-p[1], p[0], p[3])):
        x, y = _scale(x_val, 0, xmax, left, right), _scale(y_val, 0, 1, bottom, top)
        colour = CONTROL_COLOUR if control else ARM_COLOUR
        if ci is not None:
            y0, y1 = _scale(ci[0], 0, 1, bottom, top), _scale(ci[1], 0, 1, bottom, top)
            body.append(
                _line(x, y0, x, y1, f'stroke="{colour}" stroke-width="1.5" stroke-opacity="0.6"')
            )
        body.append(f'<circle cx="{_f(x)}" cy="{_f(y)}" r="5.5" fill="{colour}"/>')
        ly = y + 4  # labels go right of the point, nudged down until they overlap none
        while any(abs(ly - py) < 14 and abs(x - px) < 200 for px, py in placed):
            ly += 14
        placed.append((x, ly))
        if ly - y - 4 > 1:
            body.append(_line(x + 5, y, x + 9, ly - 4, 'stroke="#999"'))
        text = f"{name}{' (control)' * control}: {pct(y_val)}"
        body.append(_text(x + 10, ly, text, cls="halo", cut=LABEL_CHARS + 12))
    height = max(bottom + 48, max((p[1] for p in placed), default=0.0) + 10)
    if missing:  # arms with no pass rate or no cost are named, never silently dropped
        body.append(
            _text(left, height + 4, f"not plotted (no value): {', '.join(missing)}", cut=120)
        )
        height += 14
    label = f"Cost against pass rate: x is {title}, y is pass rate with Wilson 95% bars"
    return _svg("cost", WIDTH, height, label, body)


# ---------------------------------------------------------------- sections


def _verdict(report: dict[str, Any]) -> list[str]:
    if not isinstance(report.get("verdict"), str):
        return []
    rows = [_dict(r) for r in _list(report.get("checklist"))]
    failing = "; ".join(str(r.get("item", "?")) for r in rows if r.get("ok") is not True)
    text = f"Verdict: {report['verdict']}" + (f" (failing: {failing})" if failing else "")
    return [f'<p class="verdict">{_e(text)}</p>']


def _header(report: dict[str, Any]) -> list[str]:
    pins = _dict(report.get("pins"))
    out = [f"<h1>deltarun report: {_e(pins.get('protocol_id', '?'))}</h1>"]
    if report.get("stamp"):
        out.append(f'<p class="stamp">{_e(report["stamp"])}</p>')
    edited = _dict(report.get("edited"))
    if edited:
        out.append(
            f'<p class="warn">edited after the run: the ledger reported as '
            f"<code>{_e(edited.get('reported_ledger_sha256'))}</code> now has digest "
            f"<code>{_e(edited.get('ledger_sha256'))}</code> (accepted with --accept-edits)</p>"
        )
    out += _verdict(report)
    rows: list[Sequence[Cell]] = []
    names = {
        "protocol_id": "protocol id", "protocol_sha256": "protocol sha256",
        "channel": "channel", "suite_sha256": "suite sha256", "run_id": "run id",
        "control_arm": "control arm", "ledger_sha256": "ledger sha256",
        "image_digests": "image", "agent_dir_digests": "agent dir of",
        "deltarun_version": "deltarun version", "python_version": "Python version",
    }  # fmt: skip
    for key in [*names, *sorted(k for k in pins if k not in names)]:
        if key not in pins:
            continue
        value = pins[key]
        if isinstance(value, dict):
            rows += [(f"{names.get(key, key)} {k}", (str(v), "mono")) for k, v in value.items()]
        else:
            rows.append((names.get(key, key), (str(value), "mono")))
    out += ["<h2>Pins</h2>", _table(("pin", "value"), rows)]
    return out


def _headline(report: dict[str, Any], deltas: list[dict[str, Any]]) -> list[str]:
    out = ["<h2>Headline</h2>"]
    if report.get("headline_withheld") is True:
        return [
            *out,
            '<p class="warn">Withheld: two or more checklist rows fail (see the '
            "checklist). The deltas below are for inspection, not for quoting.</p>",
        ]
    items = []
    for d in deltas:
        agg = _dict(d.get("aggregate_delta"))
        mean, ci = _num(agg.get("mean")), _interval(agg.get("ci95"))
        name = f"<b>{_e(d.get('candidate_arm', '?'))}</b> vs <b>{_e(d.get('control_arm', '?'))}</b>"
        if mean is None:
            items.append(
                f"<li>{name}: no paired tasks (inconclusive {_e(agg.get('inconclusive', 0))})</li>"
            )
            continue
        ci_text = "n/a" if ci is None else f"{_pp(ci[0])} to {_pp(ci[1])} pp"
        counts = ", ".join(f"{c} {agg.get(c, 0)}" for c in (HELPED, HURT, SAME, INCONCLUSIVE))
        items.append(
            f"<li>{name}: {_e(_pp(mean))} pp pass rate (95% CI {_e(ci_text)}), "
            f"n = {_e(agg.get('n_tasks', 0))} tasks, McNemar p = "
            f"{_e(_p(agg.get('mcnemar_p')))}; {_e(counts)}</li>"
        )
    return [*out, '<ul class="headline">', *(items or ["<li>no candidate arm</li>"]), "</ul>"]


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
        rows[-1] += [_rate_text(a.get(k)) for k in rates]
        rows[-1] += [(_fmt(a.get("tokens_per_pass"), ".1f"), "num")]
        rows[-1] += [(_fmt(a.get("wall_s_per_task")), "num")]
    head = ["arm", "n", "pass rate [Wilson 95%]", "timeouts", "tool violations", "errors"]
    out = ["<h2>Arms</h2>", _table([*head, "tokens/pass", "wall s/task"], rows)]
    head = ["arm", "abstention accuracy", "invalid completions", "false abstentions (ordinary)"]
    keys = ("abstention_accuracy", "invalid_completion_rate", "false_abstention_rate")
    rows = [[name(a), *(_rate_text(_dict(a.get("refusal")).get(k)) for k in keys)] for a in arms]
    out += ["<h2>Refusal slice (negative controls)</h2>", _table(head, rows)]
    per_task = _dict(report.get("per_task"))
    names = [str(a.get("arm", "?")) for a in arms]
    names += sorted({str(arm) for by in per_task.values() for arm in _dict(by)} - set(names))
    rows = []
    for task in sorted(per_task):
        by_arm = _dict(per_task[task])
        row: list[Cell] = [str(task)]
        for arm in names:
            outcomes = [str(o) for o in _list(by_arm.get(arm))]
            row.append((", ".join(outcomes), _outcome_class(outcomes)) if outcomes else "—")
        rows.append(row)
    out += ["<h2>Outcomes per task</h2>", _table(("task", *names), rows)]
    checklist = [_dict(r) for r in _list(report.get("checklist"))]
    if checklist:
        out += ["<h2>Checklist</h2>", *_verdict(report)]
        rows = []
        for r in checklist:
            mark: Cell = ("yes", "ok") if r.get("ok") is True else ("no", "fail")
            rows.append([mark, str(r.get("item", "")), str(r.get("detail", ""))])
        out.append(_table(("ok", "item", "detail"), rows))
    return out


def render_html(report: dict[str, Any]) -> str:
    """The whole report as one self-contained, deterministic HTML page, drawn from the
    report's JSON form (``jsonform.to_json``) so it shows exactly the published numbers."""
    arms = [_dict(a) for a in _list(report.get("arms"))]
    deltas = [_dict(d) for d in _list(report.get("deltas"))]
    title = f"deltarun report: {_dict(report.get('pins')).get('protocol_id', '?')}"
    csp = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
    parts = [
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title><style>{CSS}</style></head><body>",
        *_header(report),
        *_headline(report, deltas),
        "<h2>Paired deltas (forest plot)</h2>",
        '<p class="note">Each dot is the mean per-task difference in pass rate, candidate minus '
        "control; the line is its 95% interval. Blue: the interval excludes zero upwards; red: "
        "downwards.</p>",
        _forest(deltas),
        "<h2>Pass rates</h2>",
        _passrates(arms),
        "<h2>Per-task helped / hurt</h2>",
        '<p class="note">Columns are tasks in name order, the same column in every row; hover a '
        "cell for the task and both statuses.</p>",
        _strip(deltas),
        "<h2>Cost against pass rate</h2>",
        _cost(arms),
        *_tables(report, arms),
        "</body></html>\n",
    ]
    return "\n".join(parts)
