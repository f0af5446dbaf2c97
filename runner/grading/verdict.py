"""The verdict on declared tests: canaries, the channel's records, pass or miss. Pure.

The harness's pytest plugin (``sandbox_scripts/deltarun_results.py``) sends one
JSON record per line on a socket whose only reader is the collector, of another
uid (``sandbox_scripts/collector.py``); the host reads what the collector got,
after every process of the test's uid is dead. So an outcome, once reported, is
final: the test process cannot read it back or rewrite it, only add lines, and
every line it adds is visible here. The records, in order::

    start                         run_pytest.py, before any code of the workspace runs
    collected {items, modules}    after collection: the kept items (canaries included)
                                  and the file each test module was imported from
    collect_error {n}             during collection
    report {n, w, o}              one per test phase (setup, call, teardown)
    finish {status}               pytest's exit status, at the end of the session

*Tampering* (a miss and a tool violation): a second record of the same kind where
one is expected (the same test phase reported twice, two ``collected``, two
``finish``), a report before ``collected`` or of a test it did not list, anything
after ``finish``, a line the plugin did not write (when the session finished), a
declared test module imported from another file than its own, and the canaries
(``runner.grading.canaries``): in each declared test file the harness writes a test
that must pass and one that must fail, shaped and placed like the file's own tests,
which only the host can tell apart. A must-fail canary that passes, or a must-pass
canary that fails while every declared test passed, means something in the test
process rewrote outcomes or patched pytest.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from runner.grading.canaries import Canary
from runner.trees.declared import matches, test_files

CHANNEL_CAP = 16 << 20
PASSING = frozenset({"passed", "xpassed"})
_RANK = {"passed": 0, "xpassed": 0, "skipped": 1, "xfailed": 1, "failed": 2, "error": 3}
_WHEN = frozenset({"setup", "call", "teardown"})


@dataclass(frozen=True)
class Verdict:
    """A declared-tests verdict and, for a miss, why."""

    passed: bool
    reason: str | None
    executed: int = 0
    tampered: bool = False


# --- the channel ---------------------------------------------------------------------


@dataclass
class Records:
    """What the channel said, in order, and every sign of tampering it showed."""

    started: bool = False
    items: list[str] | None = None
    modules: dict[str, str] = field(default_factory=dict)
    collect_errors: list[str] = field(default_factory=list)
    phases: dict[tuple[str, str], str] = field(default_factory=dict)
    status: int | None = None
    foreign: int = 0  # lines after start that are no record of the plugin's
    tampering: list[str] = field(default_factory=list)

    def outcomes(self) -> dict[str, str]:
        """Each test's outcome: its worst phase (a failing teardown fails a passing test)."""
        found: dict[str, str] = {}
        for (nodeid, _when), outcome in self.phases.items():
            previous = found.get(nodeid)
            if previous is None or _RANK[outcome] > _RANK[previous]:
                found[nodeid] = outcome
        return found


def read_channel(data: bytes) -> Records:
    """The records of the channel's bytes (whatever came before ``start`` is ignored)."""
    found = Records()
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        record = _record(line)
        if not found.started:
            found.started = record is not None and record["t"] == "start"
            continue
        if record is None:
            found.foreign += 1
            continue
        _take(found, record)
    return found


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


# The shape of each kind of record the plugin writes.
_SHAPES: dict[str, Callable[[dict[str, Any]], bool]] = {
    "start": lambda r: True,
    "collected": lambda r: (
        _strings(r.get("items"))
        and isinstance(r.get("modules"), dict)
        and _strings(list(r["modules"].values()))
    ),
    "collect_error": lambda r: isinstance(r.get("n"), str),
    "report": lambda r: isinstance(r.get("n"), str) and r.get("w") in _WHEN and r.get("o") in _RANK,
    "finish": lambda r: isinstance(r.get("status"), int),
}


def _record(line: bytes) -> dict[str, Any] | None:
    """A record the plugin could have written, or None."""
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or value.get("t") not in _SHAPES:
        return None
    return value if _SHAPES[value["t"]](value) else None


def _take(found: Records, record: dict[str, Any]) -> None:
    """One record into ``found``; what no honest session sends is noted as tampering."""
    kind = record["t"]
    if found.status is not None:
        found.tampering.append(f"a {kind} record after the session finished")
    elif kind == "start":
        found.tampering.append("a second start record")
    elif kind == "collected":
        if found.items is not None:
            found.tampering.append("a second list of collected tests")
        else:
            found.items = list(record["items"])
            found.modules = {str(k): str(v) for k, v in record["modules"].items()}
    elif kind == "collect_error":
        found.collect_errors.append(record["n"])
    elif kind == "report":
        key = (record["n"], record["w"])
        if found.items is None:
            found.tampering.append(f"a report of {key[0]} before collection ended")
        elif key[0] not in found.items:
            found.tampering.append(f"a report of {key[0]}, which was not collected")
        elif key in found.phases:
            found.tampering.append(f"{key[0]} ({key[1]}) reported twice")
        else:
            found.phases[key] = record["o"]
    elif kind == "finish":
        found.status = record["status"]


# --- the verdict ---------------------------------------------------------------------


def grade(
    selected: Sequence[str],
    planted: Sequence[Canary],
    channel: bytes,
    exit_code: int | None,
    *,
    rootdir: str = "/workspace",
    overflowed: bool = False,
    runner: str = "pytest",
    records: Records | None = None,
) -> Verdict:
    """The verdict on what the collector received after the test process ended
    (``runner``: the task's test runner, as the reasons name it; ``records``: the channel
    already read by ``read_channel``, so a large channel is parsed once)."""
    records = read_channel(channel) if records is None else records
    if overflowed:
        return Verdict(False, f"the test process sent more than {CHANNEL_CAP} bytes of results")
    if not records.started:
        return Verdict(False, f"the test process ended (exit {exit_code}) before {runner} reported")
    outcomes = records.outcomes()
    items = records.items or []
    ran = [c for c in planted if c.nodeid in items]
    tampered = _tampering(records, selected, planted, outcomes, rootdir)
    if tampered is not None:
        return Verdict(False, f"test process tampered: {tampered}", tampered=True)
    if records.status is None:
        return Verdict(False, f"the test process ended (exit {exit_code}) before {runner} reported")
    canary_ids = {c.nodeid for c in planted}
    tests = {k: v for k, v in outcomes.items() if k not in canary_ids}
    executed = sum(1 for v in tests.values() if v != "skipped")
    bad = sorted(k for k, v in tests.items() if v in ("failed", "error"))
    if bad:
        return Verdict(False, f"{len(bad)} test(s) failed or errored, first {bad[0]}", executed)
    if records.collect_errors:
        return Verdict(False, f"collection failed for {records.collect_errors[0]}", executed)
    for entry in selected:
        named = [k for k in tests if matches(k, entry)]
        if not named:
            return Verdict(False, f"declared test {entry} did not run", executed)
        missed = [k for k in named if tests[k] not in PASSING]
        if missed:
            return Verdict(False, f"{missed[0]}: {tests[missed[0]]}", executed)
    broken = [c.nodeid for c in ran if not c.fail and outcomes.get(c.nodeid) not in PASSING]
    if broken:
        why = f"a test that must pass did not ({broken[0]}) while every declared test passed"
        return Verdict(False, f"test process tampered: {why}", executed, tampered=True)
    if executed == 0:
        return Verdict(False, "no test ran", executed)
    expected = 1 if any(c.fail for c in ran) else 0
    if records.status != expected or exit_code != expected:
        why = f"{runner} exit status {records.status}, process exit {exit_code}"
        return Verdict(False, f"{why} (the harness expects {expected})", executed)
    return Verdict(True, None, executed)


def _tampering(
    records: Records,
    selected: Sequence[str],
    planted: Sequence[Canary],
    outcomes: dict[str, str],
    rootdir: str,
) -> str | None:
    """The first sign of tampering, or None."""
    if records.tampering:
        return records.tampering[0]
    if records.foreign and records.status is not None:
        return f"{records.foreign} line(s) on the results channel the harness did not write"
    items = set(records.items or [])
    collected = {item.split("::", 1)[0] for item in items}
    for file in sorted(set(test_files(selected)) & collected):
        imported = records.modules.get(file)
        if imported != posixpath.join(rootdir, file):
            return f"test module {file} was imported from {imported or 'nowhere said'}"
    # Any failure may end the session (-x, --maxfail), a must-fail canary's too: then the
    # tests after it, canaries included, never report. Without one, every canary must.
    ended_early = bool(records.collect_errors) or any(
        v in ("failed", "error") for v in outcomes.values()
    )
    for canary in planted:
        if canary.file in collected and canary.nodeid not in items:
            return f"a test the harness added to {canary.file} was not collected"
        outcome = outcomes.get(canary.nodeid)
        if canary.fail and outcome in PASSING:
            return f"a test that must fail passed ({canary.nodeid})"
        if (
            records.status is not None
            and not ended_early
            and canary.nodeid in items
            and outcome is None
        ):
            return f"a test the harness added did not report ({canary.nodeid})"
    return None
