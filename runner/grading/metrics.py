"""Built-in metrics of answer tasks: pure functions over the answer and the task.

A metric takes the parsed answer, the task's oracle and the agent phase's wall
time, and returns True (holds) or False. An answer task passes when every
metric it lists holds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from runner.hashing import canonical_json
from runner.records import AnswerTask

Metric = Callable[[Any, AnswerTask, float], bool]


def exact_match(answer: Any, task: AnswerTask, wall_s: float) -> bool:
    """The answer equals the oracle as canonical JSON (key order does not matter)."""
    try:
        return canonical_json(answer) == canonical_json(task.expect)
    except (TypeError, ValueError):
        return False


def json_schema_ok(answer: Any, task: AnswerTask, wall_s: float) -> bool:
    """The answer satisfies the task's JSON Schema. Fails closed: a task without a schema
    cannot list this metric (refused when the suite is loaded), and holds nothing here."""
    if task.schema_ is None:
        return False
    import jsonschema  # its import is a tenth of a CLI start: answer tasks with a schema only

    try:
        jsonschema.validate(answer, task.schema_)
    except jsonschema.ValidationError:
        return False
    return True


def within_deadline(answer: Any, task: AnswerTask, wall_s: float) -> bool:
    """The agent phase ended within the task's deadline."""
    return wall_s <= task.deadline_s


BUILTIN: dict[str, Metric] = {
    "exact_match": exact_match,
    "json_schema_ok": json_schema_ok,
    "within_deadline": within_deadline,
}


def score_answer(
    answer: Any, task: AnswerTask, wall_s: float, registry: Mapping[str, Metric] = BUILTIN
) -> tuple[bool, dict[str, bool]]:
    """All metrics of a task on one answer; unknown metric names raise ``KeyError``.

    A metric that raises counts as not holding: user metrics never crash a trial.
    """
    results: dict[str, bool] = {}
    for name in task.metrics:
        try:
            results[name] = bool(registry[name](answer, task, wall_s))
        except KeyError:
            raise
        except Exception:
            results[name] = False
    return all(results.values()), results
