"""How a trial's facts become its outcome. Pure; the rules of docs/outcomes-and-statistics.md.

Order matters: an infrastructure error is never an agent failure, a timeout is
never a miss, and an abstention decides before any verdict. On a negative task
only a clean abstention counts: abstaining *and* leaving no change (an empty
patch, no answer); an abstention that also changed something is an invalid
completion, so an arm cannot do the work and claim the refusal too.
"""

from __future__ import annotations

from runner.records import Outcome, TaskKind


def classify(
    *,
    kind: TaskKind,
    infra_error: bool,
    timed_out: bool,
    abstained: bool,
    passed: bool,
    changed: bool = False,
) -> Outcome:
    """The outcome of one trial from what happened in it."""
    if infra_error:
        return Outcome.ERROR
    if timed_out:
        return Outcome.TIMEOUT
    if kind is TaskKind.NEGATIVE:
        return Outcome.ABSTAIN_OK if abstained and not changed else Outcome.INVALID_COMPLETION
    if abstained:
        return Outcome.FALSE_ABSTAIN
    return Outcome.SUCCESS if passed else Outcome.MISS
