"""An agent's steps as the task page shows them: a title, the step's tokens, a readable
body. Pure.

Two shapes arrive in a record's ``transcript``: the ``openai`` model loop's conversation
(``role``, ``content``, ``tool_calls`` whose ``arguments`` are a JSON string; an
assistant turn adds ``turn``, ``model``, ``usage`` as [prompt, completion] and
``attempts``; a tool result adds ``name`` and, when refused, ``refused``) and an
installed agent's trajectory (``role``, ``text``, ``tool``, ``arguments``, ``result``,
``input_tokens``, ``output_tokens``). Anything else is shown as JSON. The text is the
sandbox's or the model's: bounded here, set as text by the page.
"""

from __future__ import annotations

import json
from typing import Any

from runner.view.text import shown_text

STEPS_MAX = 2000
STEP_CHARS = 20_000
_TITLE_KEYS = ("role", "kind", "type", "name")
_META_KEYS = ("turn", "model", "attempts", "tool_call_id")
_TEXT_KEYS = ("content", "text")
_SHOWN = frozenset(
    {*_TITLE_KEYS, *_META_KEYS, *_TEXT_KEYS, "tool_calls", "tool", "arguments", "result",
     "usage", "input_tokens", "output_tokens", "refused"}
)  # fmt: skip


def steps(transcript: Any) -> list[dict[str, Any]]:
    """Each entry of a transcript as ``{"title", "tokens", "body"}``; ``tokens`` is
    [in, out] for a step that reports them (a model's reply), else None."""
    entries = transcript if isinstance(transcript, list) else []
    return [_step(entry) for entry in entries[:STEPS_MAX]]


def _step(entry: Any) -> dict[str, Any]:
    if not isinstance(entry, dict):
        return {"title": "step", "tokens": None, "body": _cut(_json(entry))}
    title = " ".join(_text(entry.get(key), 80) for key in _TITLE_KEYS if entry.get(key))
    calls = [name for name, _ in _calls(entry)]
    if calls:
        title += " → " + ", ".join(calls)
    if entry.get("refused"):
        title += f" (refused: {_text(entry.get('refused'), 60)})"
    return {"title": title or "step", "tokens": tokens(entry), "body": _cut(_body(entry))}


def tokens(entry: dict[str, Any]) -> list[int] | None:
    """[input, output] tokens of one step: the loop's ``usage`` ([prompt, completion] or an
    object of either naming), or an installed step's ``input_tokens``/``output_tokens``."""
    usage = entry.get("usage")
    if isinstance(usage, list) and len(usage) == 2:
        counts = [_count(usage[0]), _count(usage[1])]
    elif isinstance(usage, dict):
        counts = [
            _count(usage.get("prompt_tokens", usage.get("input_tokens"))),
            _count(usage.get("completion_tokens", usage.get("output_tokens"))),
        ]
    else:
        counts = [_count(entry.get("input_tokens")), _count(entry.get("output_tokens"))]
    if counts[0] is None and counts[1] is None:
        return None
    return [counts[0] or 0, counts[1] or 0]


def _body(entry: dict[str, Any]) -> str:
    """The step as text: a line of its metadata, its message, each call with its
    arguments, a tool's result, then any field not known here as JSON."""
    parts = []
    meta = [f"{key} {_text(entry[key], 200)}" for key in _META_KEYS if _scalar(entry.get(key))]
    if meta:
        parts.append(" · ".join(meta))
    parts += [entry[key] for key in _TEXT_KEYS if isinstance(entry.get(key), str) and entry[key]]
    for name, arguments in _calls(entry):
        parts.append(f"→ {name}" + (f"\n{arguments}" if arguments else ""))
    if entry.get("result") not in (None, ""):
        parts.append("← " + _text(entry.get("result"), STEP_CHARS))
    rest = {key: value for key, value in entry.items() if key not in _SHOWN}
    if rest:
        parts.append(_json(rest))
    return "\n".join(parts)


def _calls(entry: dict[str, Any]) -> list[tuple[str, str]]:
    """(name, arguments as text) of each call a step asks for: the loop's ``tool_calls``
    or an installed step's ``tool``."""
    found = []
    raw = entry.get("tool_calls")
    for call in raw[:100] if isinstance(raw, list) else []:
        if not isinstance(call, dict):
            continue
        function = call.get("function")
        if not isinstance(function, dict):
            function = call
        name = _text(function.get("name"), 80) or "?"
        found.append((name, _arguments(function.get("arguments"))))
    if entry.get("tool"):
        found.append((_text(entry.get("tool"), 80), _arguments(entry.get("arguments"))))
    return found


def _arguments(value: Any) -> str:
    """A call's arguments, readable: a JSON object's fields one by one (a text with line
    breaks, such as a patch, as it is), anything else as given."""
    parsed = value
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except (ValueError, RecursionError):
            return value
    if not isinstance(parsed, dict):
        return "" if parsed in (None, "", {}) else _json(parsed)
    lines = []
    for key, item in parsed.items():
        if isinstance(item, str) and "\n" in item:
            lines.append(f"{_text(key, 100)}:\n{item}")
        else:
            lines.append(f"{_text(key, 100)}: {_json(item)}")
    return "\n".join(lines)


def _count(value: Any) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return value if ok else None


def _scalar(value: Any) -> bool:
    return isinstance(value, str | int | float) and not isinstance(value, bool) and value != ""


def _text(value: Any, limit: int) -> str:
    return value[:limit] if isinstance(value, str) else "" if value is None else str(value)[:limit]


def _json(value: Any) -> str:
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError, RecursionError):
        return str(value)


def _cut(text: str) -> str:
    return str(shown_text(text, STEP_CHARS)["text"])
