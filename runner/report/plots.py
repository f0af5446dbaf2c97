"""The report's plots as inline SVG, and the value helpers the page shares. Pure.

Each plot is built here from the report's JSON form (no library, no script, no
fetch): the forest plot of the deltas, pass rates with Wilson bars, the per-task
helped/hurt strip and cost against pass rate. Values are read defensively: a
missing or non-finite number prints n/a and draws no mark."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from html import escape
from typing import Any

from runner.report.format import pct

HELPED, HURT, SAME, INCONCLUSIVE = "helped", "hurt", "same", "inconclusive"
CONTROL_COLOUR, ARM_COLOUR, NEUTRAL = "#8c8c8c", "#4575b4", "#333333"

COLOURS = {HELPED: "#2166ac", HURT: "#d6604d", SAME: "#d9d9d9", INCONCLUSIVE: "#fee08b"}


GLYPHS = {HELPED: "+", HURT: "−", SAME: "=", INCONCLUSIVE: "?"}


GOOD_OUTCOMES = {"success", "abstain_ok"}


WIDTH = 1060.0  # every plot is this wide, the width of the page


LABEL_CHARS = 34  # plot labels longer than this are cut, the full text goes in a <title>


def esc(value: Any) -> str:
    return escape(str(value), quote=True)


def as_number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def as_interval(value: Any) -> tuple[float, float] | None:
    if isinstance(value, list | tuple) and len(value) == 2:
        lo, hi = as_number(value[0]), as_number(value[1])
        if lo is not None and hi is not None:
            return lo, hi
    return None


def _f(value: float) -> str:
    """An SVG coordinate."""
    return f"{value:.1f}"


def pp_text(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:+.1f}"


def fmt_number(value: Any, spec: str = ".2f") -> str:
    number = as_number(value)
    return "n/a" if number is None else format(number, spec)


def p_value(value: Any) -> str:
    return fmt_number(value, ".4g")


def _text(
    x: float, y: float, text: str, anchor: str = "start", cls: str = "", cut: int = 80
) -> str:
    """A plot label; one longer than ``cut`` is cut and keeps its full text as a tooltip."""
    attr = f' class="{cls}"' if cls else ""
    tip = f"<title>{esc(text)}</title>" if len(text) > cut else ""
    short = text if len(text) <= cut else text[: cut - 1] + "…"
    return f'<text{attr} x="{_f(x)}" y="{_f(y)}" text-anchor="{anchor}">{tip}{esc(short)}</text>'


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
        f'<svg class="plot {cls}" role="img" aria-label="{esc(label)}" width="{_f(width)}" '
        f'height="{_f(height)}" viewBox="0 0 {_f(width)} {_f(height)}">' + "".join(body) + "</svg>"
    )


def _scale(value: float, lo: float, hi: float, a: float, b: float) -> float:
    value = min(max(value, lo), hi)
    return a + (value - lo) / (hi - lo) * (b - a)


def _rate(rate: Any) -> tuple[float | None, tuple[float, float] | None]:
    r = as_dict(rate)
    return as_number(r.get("value")), as_interval(r.get("wilson95"))


def rate_text(rate: Any) -> str:
    r = as_dict(rate)
    value, ci = _rate(r)
    if value is None or ci is None:
        return f"n/a (n={r.get('n', 0)})"
    return f"{pct(value)} [{pct(ci[0])}, {pct(ci[1])}] ({r.get('k')}/{r.get('n')})"


def _category(delta: float | None) -> str:
    if delta is None:
        return INCONCLUSIVE
    return HELPED if delta > 0 else HURT if delta < 0 else SAME


def _delta_name(d: dict[str, Any]) -> str:
    return f"{d.get('candidate_arm', '?')} vs {d.get('control_arm', '?')}"


def _axis_x(
    ticks: Sequence[tuple[float, str]], top: float, bottom: float, zero: float
) -> list[str]:
    """Vertical grid lines at the given x positions, their labels under the plot."""
    out = []
    for x, text in ticks:
        out.append(_line(x, top, x, bottom, f'class="{"zero" if x == zero else "grid"}"'))
        out.append(_text(x, bottom + 16, text, "middle", "tick"))
    return out


def forest(deltas: list[dict[str, Any]]) -> str:
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
        agg = as_dict(d.get("aggregate_delta"))
        mean, ci = as_number(agg.get("mean")), as_interval(agg.get("ci95"))
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
            ci_text = "n/a" if ci is None else f"{pp_text(ci[0])}, {pp_text(ci[1])}"
            n, p = agg.get("n_tasks", 0), p_value(agg.get("mcnemar_p"))
            text = f"{pp_text(mean)} [{ci_text}] · n={n} · p={p}"
        body.append(_text(right + 14, y + 4, text))
    label = "Forest plot: each candidate's paired pass-rate delta against its control, with 95% CI"
    return _svg("forest", WIDTH, bottom + 46, label, body)


def passrates(arms: list[dict[str, Any]]) -> str:
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
        body.append(_text(right + 14, y + 4, rate_text(arm.get("pass_rate"))))
    label = "Pass rate of each arm with its Wilson 95% interval; the control is grey and dashed"
    return _svg("passrates", WIDTH, bottom + 28, label, body)


def strip(deltas: list[dict[str, Any]]) -> str:
    """Per delta, one cell per task (same column = same task), coloured by its paired outcome."""
    cases = [
        {str(c.get("case_id")): c for c in map(as_dict, as_list(d.get("per_case")))} for d in deltas
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
        agg = as_dict(d.get("aggregate_delta"))
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
                    f'stroke="#bbb"><title>{esc(task)}: absent</title></rect>'
                )
                continue
            delta = as_number(case.get("delta"))
            cat = _category(delta)
            tip = (
                f"{task}: {cat}; control {case.get('control_status', '?')} → candidate "
                f"{case.get('candidate_status', '?')}; delta {fmt_number(delta, '+.2f')}"
            )
            body.append(
                f'<rect x="{_f(x)}" y="{_f(y)}" width="{size}" height="{size}" '
                f'fill="{COLOURS[cat]}"><title>{esc(tip)}</title></rect>'
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


def cost(arms: list[dict[str, Any]]) -> str:
    """Arms as points: wall time per task (or tokens per pass) against pass rate, Wilson bars."""
    rated = [a for a in arms if _rate(a.get("pass_rate"))[0] is not None]
    tokens = [as_number(a.get("tokens_per_pass")) for a in rated]
    use_tokens = bool(rated) and all(t is not None for t in tokens) and any(tokens)
    key = "tokens_per_pass" if use_tokens else "wall_s_per_task"
    title = "tokens per pass" if use_tokens else "wall seconds per task"
    points, missing = [], []
    for arm in arms:
        x, (y, ci) = as_number(arm.get(key)), _rate(arm.get("pass_rate"))
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
