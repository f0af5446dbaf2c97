"""Each setup warning of the report with the trials behind it, for the run page. Pure.

The report's setup warnings (``runner.store.setup_warnings``) are lines of text naming at
most a few tasks; the signs behind them are per record (``first_sign``, and a hidden test
that ran no test, which ``setup_warnings`` counts on any arm). A warning is matched to its
kind of sign by how it begins (the arm it names included), and linked to every trial
showing that sign; a warning this deltarun does not know stays a line without links.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from runner.config.controls import Controls
from runner.records import Trial
from runner.setup_signals import NO_TEST_RAN, signal_of
from runner.store.setup_warnings import first_sign

LINKED_MAX = 200  # trials linked from one warning; the rest are counted
WARNING_CHARS = 4000
NO_TEST = "no-test"
# How each warning begins → the key ``first_sign`` gives its records (``kind:arm`` for the
# kinds that name an arm).
KINDS = (
    (re.compile(r"^the control (?P<arm>.+?) passes "), "control-passes"),
    (re.compile(r"^arm (?P<arm>.+?): the recorded patch does not apply "), "refused"),
    (re.compile(r"^arm (?P<arm>.+?): no recorded output "), "empty"),
    (re.compile(r"^arm (?P<arm>.+?): the agent exited 126/127 "), "lost"),
    (re.compile(r"^the hidden test ran no test "), NO_TEST),
)
_ARMLESS = ("control-passes", NO_TEST)


def signs(controls: Controls, record: Trial) -> set[str]:
    """The keys of the setup signs one record shows (none for most)."""
    found = set()
    first = first_sign(controls, record)
    if first is not None:
        found.add(first[0])
    if signal_of(record.reason, record.agent_log) == NO_TEST_RAN:
        found.add(NO_TEST)
    return found


def key_of(warning: str) -> str | None:
    """The sign key of one warning line, or None for a warning this deltarun does not know."""
    for pattern, kind in KINDS:
        match = pattern.match(warning)
        if match is not None:
            return kind if kind in _ARMLESS else f"{kind}:{match.group('arm')}"
    return None


def linked(warnings: Sequence[Any], shown: Iterable[tuple[int, set[str]]]) -> list[dict[str, Any]]:
    """Each warning as ``{"text", "trials", "more"}``: the ledger lines of the trials showing
    its sign (``shown``: each line with its keys), at most ``LINKED_MAX``, and how many more."""
    by_key: dict[str, list[int]] = {}
    for line, keys in shown:
        for key in keys:
            by_key.setdefault(key, []).append(line)
    out = []
    for warning in warnings:
        text = warning if isinstance(warning, str) else json.dumps(warning, sort_keys=True)
        sign = key_of(text)
        lines = by_key.get(sign, []) if sign is not None else []
        out.append(
            {
                "text": text[:WARNING_CHARS],
                "trials": lines[:LINKED_MAX],
                "more": max(0, len(lines) - LINKED_MAX),
            }
        )
    return out
