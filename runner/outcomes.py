"""How a trial's facts become its outcome. Pure; the rules of README "Outcomes and numbers".

Order matters: an infrastructure error is never an agent failure, a timeout is
never a miss, and an abstention decides before any verdict.
"""

from __future__ import annotations

from runner.models import Outcome, TaskKind


def classify(
    *,
    kind: TaskKind,
    infra_error: bool,
    timed_out: bool,
    abstained: bool,
    passed: bool,
) -> Outcome:
    """The outcome of one trial from what happened in it."""
    if infra_error:
        return Outcome.ERROR
    if timed_out:
        return Outcome.TIMEOUT
    if kind is TaskKind.NEGATIVE:
        return Outcome.ABSTAIN_OK if abstained else Outcome.INVALID_COMPLETION
    if abstained:
        return Outcome.FALSE_ABSTAIN
    return Outcome.SUCCESS if passed else Outcome.MISS
