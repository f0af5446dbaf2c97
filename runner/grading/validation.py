"""Is each task a fair question? The verdicts of ``deltarun validate``. Pure.

A task is ``valid`` when its hidden test fails on the bare fixture and passes with
the gold patch, every time, in the task's own image and sandbox. Anything else is
a setup mistake that would otherwise turn into an agent's score:

================================  ==========================================================
verdict                           meaning
================================  ==========================================================
``valid``                         bare fixture fails, gold passes, in every run
``setup-broken``                  the gold side's tests never ran because the setup broke:
                                  a collection error, a usage error (a settings option
                                  whose plugin the image lacks), the project's own package
                                  not importable, an install step that failed; the detail
                                  is the first error line and the fix to try
``test-not-collected``            the runner found no test to run (a wrong path, pytest
                                  exit 4 or 5, a declared test that never ran)
``gold-does-not-apply``           ``git apply`` refused the gold patch (or it is unreadable)
``flaky``                         the same side gave different verdicts across the n runs
``passes-without-fix``            the bare fixture already passes: a broken task, or the
                                  test imports code the image already has (shadowing)
``gold-fails``                    the gold patch applies and the test still fails
``no-gold``                       no gold patch for the task: only the bare side was run
``error``                         infrastructure failed (the record's error); run it again
``negative-has-hidden``           a negative task carries a hidden test (only abstaining
                                  is correct there, so nothing may grade a change)
``not-checked``                   an answer task: graded by metrics, not by a test
================================  ==========================================================

When several apply, the first of: error, setup-broken, test-not-collected,
gold-does-not-apply, flaky, passes-without-fix, no-gold, gold-fails, valid.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from runner.records import RepoTask, Task, TaskKind, Trial
from runner.setup_signals import not_collected, setup_failure

VALID = "valid"
FINE = (VALID, "not-checked")


@dataclass(frozen=True)
class Check:
    """One run of one side (bare fixture or gold patch) of one task, from its record."""

    passed: bool
    applied: bool  # the agent phase applied the patch (always True for the bare side)
    not_collected: bool
    error: str | None
    note: str  # one line: the reason, or the exit status
    setup: str | None = None  # the tests never ran: the first error line and the fix to try

    def as_json(self) -> dict[str, object]:
        return {
            "passed": self.passed,
            "applied": self.applied,
            "not_collected": self.not_collected,
            "setup": self.setup,
            "error": self.error,
            "note": self.note,
        }


def check_of(trial: Trial, task: RepoTask, gold: bool) -> Check:
    """What one record says about its side of the task."""
    reason = trial.reason or ""
    exit_code = trial.verify_exit_code
    command_runner_found_nothing = (
        task.hidden_tests is None and "pytest" in (task.hidden_test or "") and exit_code in (4, 5)
    )
    applied = not gold or trial.agent_exit_code in (0, None)
    note = reason or (f"hidden test exit {exit_code}" if exit_code is not None else "")
    if gold and not applied:
        note = trial.agent_log.strip().splitlines()[-1] if trial.agent_log.strip() else note
    return Check(
        passed=trial.passed,
        applied=applied,
        not_collected=command_runner_found_nothing or not_collected(reason),
        error=trial.error,
        note=note[:300],
        setup=setup_failure(reason, trial.verify_log) if applied else None,
    )


@dataclass(frozen=True)
class Verdict:
    verdict: str
    detail: str


def classify(task: Task, bare: Sequence[Check], gold: Sequence[Check] | None) -> Verdict:
    """The verdict of one task from its runs (``gold`` None: no gold patch exists)."""
    if not isinstance(task, RepoTask):
        return Verdict("not-checked", "answer task: graded by its metrics")
    if task.kind is TaskKind.NEGATIVE:
        if task.hidden is not None or task.hidden_test or task.hidden_tests:
            return Verdict("negative-has-hidden", "remove hidden, hidden_test and hidden_tests")
        return Verdict(VALID, "negative task without a hidden side")
    runs = [*bare, *(gold or [])]
    failed = [c for c in runs if c.error is not None]
    if failed:
        return Verdict("error", failed[0].error or "")
    # With a gold patch, its runs say whether a test is found (a bare fixture may rightly
    # fail to collect: the test imports what the fix adds). Without one, the bare runs.
    judged = gold if gold else bare
    broken = [c for c in judged if c.setup is not None]
    if broken and not any(c.passed for c in judged):
        return Verdict("setup-broken", broken[0].setup or "")
    missing = [c for c in judged if c.not_collected]
    if missing:
        return Verdict("test-not-collected", missing[0].note)
    if gold is not None:
        refused = [c for c in gold if not c.applied]
        if refused:
            return Verdict("gold-does-not-apply", refused[0].note)
    for side, checks in (("bare fixture", bare), ("gold patch", gold or [])):
        if len({c.passed for c in checks}) > 1:
            passes = sum(c.passed for c in checks)
            return Verdict("flaky", f"{side}: passed {passes} of {len(checks)} runs")
    if bare and all(c.passed for c in bare):
        return Verdict("passes-without-fix", "the hidden test passes on the bare fixture")
    if gold is None:
        return Verdict("no-gold", "no gold patch; the bare fixture fails as it should")
    if gold and not any(c.passed for c in gold):
        return Verdict("gold-fails", gold[0].note)
    return Verdict(VALID, f"bare fails and gold passes in {len(bare)} run(s) each")
