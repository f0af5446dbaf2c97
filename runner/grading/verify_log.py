"""The verify log a person reads: the runner's output with the canaries' lines left out,
its summary recounted from the collector's records of the declared tests, and one last
line saying how the canaries behaved. Pure.

The canaries (``runner.grading.canaries``) are tests the harness writes into the declared
test files; one must pass and two must fail in each file. Their outcomes say nothing
about the patch, yet the runner prints them with the declared tests': a passing trial's
output ends "4 failed, 5 passed" with a FAILURES section quoting the canaries' bodies.
Only the host knows which tests are canaries (the test process must not), so the output
is rewritten here, after the collector's records were read:

- every line and section of a canary that behaved as planted is left out, found by its
  name (pytest's progress letters by their place in the records' order); a canary that
  did not behave keeps its lines, as evidence;
- the summary line (pytest's "N passed in Ts", unittest's "Ran N tests" and
  "OK"/"FAILED (...)", sympy's "tests finished: ...") is recounted from the records of
  the declared tests, never from what the test process printed;
- the last line says how the canaries behaved ("[deltarun] canaries: 6 of 6 behaved as
  planted (2 that must pass passed, 4 that must fail did) ..."), and plainly when the test
  process tampered. The viewer reads only that last line (``runner.view.text``).

What cannot be told apart for sure (interleaved output, a plugin's own letters) is left
as the runner wrote it; the summary and the last line are right whatever it printed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from runner.grading.canaries import Canary
from runner.grading.verdict import PASSING, Records

CANARY_LINE = "[deltarun] canaries: "
# pytest's letter for each phase's outcome (its terminal reporter; "" prints nothing).
_LETTERS = {
    "call": {"passed": ".", "failed": "F", "skipped": "s", "xfailed": "x", "xpassed": "X"},
    "setup": {"skipped": "s", "error": "E"},
    "teardown": {"skipped": "s", "error": "E"},
}
_PROGRESS = re.compile(r"^(?:(\S+\.py) )?([.FEsxX]+)( *)(\[ *\d+%\])?\Z")
_RULE = re.compile(r"^={3,} (.*?) ={3,}\Z")
_SECTION = re.compile(r"^_+ (.+?) _+\Z")
_PYTEST_SUMMARY = re.compile(r"^(=+ )?((?:\d+ \w+)(?:, \d+ \w+)*|no tests ran) in (\S+.*?)( =+)?\Z")
_SUMMARY_LINE = re.compile(r"^(?:FAILED|ERROR|PASSED|XFAIL|XPASS|SKIPPED) (\S+)")
_VERBOSE = re.compile(r"^(\S+::\S+) (?:PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b")
_PERCENT = re.compile(r"\[ *\d+%\]\Z")
_COLLECTED = re.compile(r"^(?:collecting \.\.\. )?collected \d+ items?\b")
_COLLECTED_NUMBER = re.compile(r"(\d+) (items?|selected)\b")
# pytest's order of the words in its summary line ("warnings" and "errors" singular here).
_PYTEST_ORDER = (
    "failed",
    "passed",
    "skipped",
    "deselected",
    "xfailed",
    "xpassed",
    "warning",
    "error",
)
_UNIT_LINE = re.compile(r"^(\w+) \(([\w.]+)\)(?: \.\.\. .*)?\Z")
_UNIT_HEAD = re.compile(r"^(?:FAIL|ERROR|UNEXPECTED SUCCESS): (\w+) \(([\w.]+)\)")
_UNIT_RAN = re.compile(r"^Ran (\d+) tests? in (.*)\Z")
_UNIT_STATUS = re.compile(r"^(OK|FAILED)(?: \(.*\))?\Z")
_DJANGO_FOUND = re.compile(r"^Found (\d+) test\(s\)\.\Z")
_SYMPY_FILE = re.compile(r"^(\S+\.py)\[(\d+)\] ")
_SYMPY_TEST = re.compile(r"^(test_\w+) (.*?)(\s+\[(?:OK|FAIL)\])?\Z")
_SYMPY_HEAD = re.compile(r"^_+ (\S+?)::?(\w+) _+\Z")
_SYMPY_SUMMARY = re.compile(r"^(=+) tests finished: .*?in ([\d.]+ seconds) (=+)\Z")


def stored_log(
    output: str,
    runner: str,
    planted: Sequence[Canary],
    records: Records | None,
    tampered: str | None = None,
) -> str:
    """The log kept in the record: ``output`` (the runner's) rewritten as the module says,
    ``tampered`` the verdict's reason when the test process tampered."""
    if not planted:
        return output
    outcomes = records.outcomes() if records is not None and records.started else {}
    hide = [c for c in planted if _behaved(c, outcomes.get(c.nodeid))]
    lines = output.split("\n")
    if hide and records is not None:
        rewrite = {"pytest": _pytest, "sympy": _sympy}.get(runner, _unittest)
        lines = rewrite(lines, hide, {c.nodeid for c in planted}, records)
    text = "\n".join(lines).rstrip("\n")
    return (
        f"{text}\n\n{canary_line(planted, outcomes, bool(records and records.started), tampered)}\n"
    )


def _behaved(canary: Canary, outcome: str | None) -> bool:
    return outcome == "failed" if canary.fail else outcome in PASSING


def canary_line(
    planted: Sequence[Canary], outcomes: dict[str, str], reported: bool, tampered: str | None
) -> str:
    """The one line on the canaries: how many behaved as planted, each that did not, and
    whether the test process tampered."""
    passing = [c for c in planted if not c.fail]
    failing = [c for c in planted if c.fail]
    good_pass = sum(1 for c in passing if _behaved(c, outcomes.get(c.nodeid)))
    good_fail = sum(1 for c in failing if _behaved(c, outcomes.get(c.nodeid)))
    head = (
        f"{CANARY_LINE}{good_pass + good_fail} of {len(planted)} behaved as planted "
        f"({good_pass} that must pass passed, {good_fail} that must fail did)"
    )
    if not reported:
        head = (
            f"{CANARY_LINE}{len(planted)} planted ({len(passing)} that must pass, "
            f"{len(failing)} that must fail); the test process ended before reporting any"
        )
    odd = [
        f"{c.nodeid} (must {'fail' if c.fail else 'pass'}: {outcomes.get(c.nodeid, 'did not run')})"
        for c in planted
        if reported and not _behaved(c, outcomes.get(c.nodeid))
    ]
    parts = [head]
    if good_pass + good_fail:
        parts.append("their lines are left out above; the counts are the declared tests'")
    if odd:
        parts.append("not as planted (their lines kept): " + ", ".join(odd))
    if tampered:
        parts.append(f"TAMPERING: {tampered}")
    return "; ".join(parts)


# --- pytest --------------------------------------------------------------------------


def _pytest(
    lines: list[str], hide: Sequence[Canary], canaries: set[str], records: Records
) -> list[str]:
    ids = {c.nodeid for c in hide}
    lines = _progress(lines, ids, canaries, records)
    lines = _drop_sections(lines, _pytest_heads(hide, records))
    kept = [
        line
        for line in lines
        if not any(
            m and m.group(1) in ids for m in (_SUMMARY_LINE.match(line), _VERBOSE.match(line))
        )
    ]
    kept = _verbose_progress(_drop_empty_rules(kept), canaries, records)
    return _pytest_summary(kept, records, canaries)


def _verbose_progress(lines: list[str], canaries: set[str], records: Records) -> list[str]:
    """Verbose lines' ``[ NN%]`` and the ``collected N items`` line, counted over the
    declared tests (the canaries' lines are gone)."""
    items = records.items or []
    total = len([n for n in items if n not in canaries]) or 1
    collected = len([n for n in items if n in canaries])
    seen: set[str] = set()
    out = []
    for line in lines:
        verbose = _VERBOSE.match(line)
        percent = _PERCENT.search(line)
        if verbose is not None and percent is not None and verbose.group(1) not in canaries:
            seen.add(verbose.group(1))
            new = f"[{100 * len(seen) // total:3d}%]"
            line = line[: percent.start()] + new + line[percent.end() :]
        elif collected and _COLLECTED.match(line) is not None:
            line = _COLLECTED_NUMBER.sub(
                lambda m: f"{max(0, int(m.group(1)) - collected)} {m.group(2)}", line
            )
        out.append(line)
    return out


def _progress(lines: list[str], hide: set[str], canaries: set[str], records: Records) -> list[str]:
    """pytest's progress letters (``..FF.F [100%]``) without the hidden canaries', when the
    letters printed are exactly those the records give, in order; else as printed."""
    owners = [
        nodeid
        for (nodeid, when), outcome in records.phases.items()
        for _ in _LETTERS[when].get(outcome, "")
    ]
    end = next(
        (i for i, line in enumerate(lines) if _RULE.match(line) and "starts" not in line),
        len(lines),
    )
    found = [(i, m) for i, line in enumerate(lines[:end]) if (m := _PROGRESS.match(line))]
    letters = "".join(m.group(2) for _, m in found)
    expected = "".join(_LETTERS[w].get(o, "") for (_, w), o in records.phases.items())
    if not found or letters != expected:
        return lines
    total = len({n for n in (records.items or []) if n not in canaries}) or 1
    out = list(lines)
    at, seen = 0, set()
    for index, match in found:
        chars = ""
        for char in match.group(2):
            owner = owners[at]
            at += 1
            if owner not in hide:
                chars += char
                if owner not in canaries:
                    seen.add(owner)
        if not chars:
            out[index] = "\0"
            continue
        head = f"{match.group(1)} " if match.group(1) else ""
        text = head + chars
        if match.group(4):
            percent = f"[{100 * len(seen) // total:3d}%]"
            text += " " * max(1, len(lines[index]) - len(text) - len(percent)) + percent
        out[index] = text
    return [line for line in out if line != "\0"]


def _pytest_heads(hide: Sequence[Canary], records: Records) -> set[str]:
    """The section titles of the hidden canaries (``test_x``, ``Class.test_x``) that no
    declared test shares: a title a declared test also has is never left out."""

    def head(nodeid: str) -> str:
        parts = nodeid.split("::")[1:]
        return ".".join(parts)

    declared = {head(n) for n in records.items or [] if n not in {c.nodeid for c in hide}}
    return {h for c in hide if (h := head(c.nodeid)) not in declared}


def _drop_sections(lines: list[str], heads: set[str]) -> list[str]:
    """Lines without the ``____ title ____`` sections (to the next such title or rule)
    whose title names one of ``heads``."""
    out: list[str] = []
    skipping = False
    for line in lines:
        section = _SECTION.match(line)
        if section is not None:
            title = re.sub(r"^ERROR at (?:setup|teardown) of ", "", section.group(1))
            skipping = title in heads
        elif _RULE.match(line) or _PYTEST_SUMMARY.match(line):
            skipping = False
        if not skipping:
            out.append(line)
    return out


def _drop_empty_rules(lines: list[str]) -> list[str]:
    """A ``=== FAILURES ===`` (or ERRORS, PASSES, short test summary) rule whose every
    entry was left out goes too."""
    out: list[str] = []
    for index, line in enumerate(lines):
        rule = _RULE.match(line)
        if rule and rule.group(1) in ("FAILURES", "ERRORS", "PASSES", "short test summary info"):
            after = lines[index + 1] if index + 1 < len(lines) else ""
            if not after.strip() or _RULE.match(after) or _PYTEST_SUMMARY.match(after):
                continue
        out.append(line)
    return out


def _pytest_summary(lines: list[str], records: Records, canaries: set[str]) -> list[str]:
    """pytest's last summary line, its outcome counts the declared tests' per the records
    (per phase, as pytest counts: a failing teardown is one more error)."""
    index = next(
        (i for i in range(len(lines) - 1, -1, -1) if _PYTEST_SUMMARY.match(lines[i])), None
    )
    if index is None or records.status is None:
        return lines
    match = _PYTEST_SUMMARY.match(lines[index])
    assert match is not None
    counts: dict[str, int] = {}
    for (nodeid, when), outcome in records.phases.items():
        if nodeid in canaries:
            continue
        word = outcome if when == "call" else ("error" if outcome == "error" else "")
        word = "skipped" if when == "setup" and outcome == "skipped" else word
        if word:
            counts[word] = counts.get(word, 0) + 1
    if counts.get("error", 0) > 1:
        counts["errors"] = counts.pop("error")
    parts = {word: f"{n} {word}" for word, n in counts.items() if n}
    if match.group(2) != "no tests ran":  # what is not an outcome (warnings, deselected)
        for part in match.group(2).split(", "):
            word = part.split(" ", 1)[1]
            if word.rstrip("s") not in (
                "failed",
                "passed",
                "skipped",
                "xfailed",
                "xpassed",
                "error",
            ):
                parts[word] = part
    order = sorted(
        parts,
        key=lambda w: (
            _PYTEST_ORDER.index(w.rstrip("s"))
            if w.rstrip("s") in _PYTEST_ORDER
            else len(_PYTEST_ORDER)
        ),
    )
    text = f"{', '.join(parts[w] for w in order) or 'no tests ran'} in {match.group(3)}"
    if match.group(1):
        width = len(lines[index])
        side = max(1, (width - len(text) - 2) // 2)
        text = "=" * side + f" {text} " + "=" * max(1, width - side - len(text) - 2)
    return [*lines[:index], text, *lines[index + 1 :]]


# --- unittest and Django -------------------------------------------------------------


def _unit_key(name: str, dotted: str, hide: Sequence[Canary]) -> bool:
    """Does ``name (dotted)`` (unittest's way: ``mod.Class.name``, or ``mod.Class`` before
    Python 3.11) name a hidden canary? The module may be named from a folder the runner
    starts in (Django: ``test_x`` for ``tests/test_x.py``)."""
    for canary in hide:
        if canary.name != name or not canary.owner:
            continue
        for tail in (f".{canary.owner}.{name}", f".{canary.owner}"):
            if dotted.endswith(tail):
                module = dotted[: -len(tail)]
                full = canary.file[:-3].replace("/", ".")
                if module and (full == module or full.endswith("." + module)):
                    return True
    return False


def _unittest(
    lines: list[str], hide: Sequence[Canary], canaries: set[str], records: Records
) -> list[str]:
    out: list[str] = []
    skipping = False
    bar, dash = "=" * 70, "-" * 70
    for index, line in enumerate(lines):
        after = lines[index + 1] if index + 1 < len(lines) else ""
        if line == bar:
            head = _UNIT_HEAD.match(after)
            skipping = bool(head and _unit_key(head.group(1), head.group(2), hide))
        elif line == dash and after.startswith("Ran "):
            skipping = False
        if skipping:
            continue
        test = _UNIT_LINE.match(line)
        if test is not None and _unit_key(test.group(1), test.group(2), hide):
            continue
        out.append(line)
    return _unit_summary(out, canaries, records)


def _unit_summary(lines: list[str], canaries: set[str], records: Records) -> list[str]:
    """unittest's ``Ran N tests`` and ``OK`` / ``FAILED (...)``, and Django's ``Found N
    test(s).``, counted from the records of the declared tests."""
    if records.status is None:
        return lines
    items = set(records.items or [])
    outcomes = {n: o for n, o in records.outcomes().items() if n not in canaries}
    phases = [(w, o) for (n, w), o in records.phases.items() if n not in canaries]
    failures = sum(1 for w, o in phases if w == "call" and o == "failed")
    errors = sum(1 for _, o in phases if o == "error")
    extras = [
        ("skipped", sum(1 for o in outcomes.values() if o == "skipped")),
        ("expected failures", sum(1 for o in outcomes.values() if o == "xfailed")),
    ]
    out = []
    for line in lines:
        ran = _UNIT_RAN.match(line)
        status = _UNIT_STATUS.match(line)
        found = _DJANGO_FOUND.match(line)
        if ran is not None:
            n = len(outcomes)
            line = f"Ran {n} test{'' if n == 1 else 's'} in {ran.group(2)}"
        elif status is not None:
            bad = [("failures", failures), ("errors", errors)]
            infos = [f"{k}={v}" for k, v in (*bad, *extras) if v]
            word = "FAILED" if failures or errors else "OK"
            line = word + (f" ({', '.join(infos)})" if infos else "")
        elif found is not None:
            n = max(0, int(found.group(1)) - len(canaries & items))
            line = f"Found {n} test(s)."
        out.append(line)
    return out


# --- sympy ---------------------------------------------------------------------------


def _sympy(
    lines: list[str], hide: Sequence[Canary], canaries: set[str], records: Records
) -> list[str]:
    """sympy's verbose run (``file.py[n]``, then ``test_x ok`` per test, the file's
    ``[OK]`` or ``[FAIL]`` at the end of its last line), its failure sections and its
    ``tests finished`` line, without the hidden canaries."""
    hidden = {c.nodeid for c in hide}
    outcomes = {n: o for n, o in records.outcomes().items() if n not in canaries}
    out: list[str] = []
    file: str | None = None
    skipping = False
    for index, line in enumerate(lines):
        after = lines[index + 1] if index + 1 < len(lines) else ""
        header = _SYMPY_FILE.match(line)
        if header is not None:
            file = header.group(1)
            mine = sum(1 for c in hide if c.file == file)
            line = f"{file}[{max(0, int(header.group(2)) - mine)}] " + line[header.end() :]
        if set(line) == {"_"}:
            head = _SYMPY_HEAD.match(after)
            skipping = bool(head and f"{head.group(1)}::{head.group(2)}" in hidden)
        elif line.startswith("=") and skipping:
            skipping = False
            if out and out[-1].strip():
                out.append("")  # the blank line the last section's end had
        if skipping:
            continue
        test = _SYMPY_TEST.match(line)
        if test is not None and file is not None and f"{file}::{test.group(1)}" in hidden:
            if test.group(3):  # the file's last test: its verdict moves to the line before
                bad = any(
                    o in ("failed", "error")
                    for n, o in outcomes.items()
                    if n.startswith(file + "::")
                )
                out[-1] = out[-1].rstrip() + f"   [{'FAIL' if bad else 'OK'}]"
            continue
        out.append(line)
    return _sympy_summary(out, outcomes, records)


def _sympy_summary(lines: list[str], outcomes: dict[str, str], records: Records) -> list[str]:
    if records.status is None:
        return lines
    count = {o: sum(1 for v in outcomes.values() if v == o) for o in set(outcomes.values())}
    words = [
        ("failed", "failed"),
        ("skipped", "skipped"),
        ("xfailed", "expected to fail"),
        ("xpassed", "expected to fail but passed"),
        ("error", "exceptions"),
    ]
    broken = bool(count.get("failed") or count.get("error") or records.collect_errors)
    out = []
    for line in lines:
        match = _SYMPY_SUMMARY.match(line)
        if match is not None:
            text = f"tests finished: {count.get('passed', 0)} passed, " + "".join(
                f"{count[k]} {w}, " for k, w in words if count.get(k)
            )
            text += f"in {match.group(2)}"
            width = len(line)
            side = max(1, (width - len(text) - 2) // 2)
            line = "=" * side + f" {text} " + "=" * max(1, width - side - len(text) - 2)
        elif line == "DO *NOT* COMMIT!" and not broken:
            continue
        out.append(line)
    return out
