"""A pipeline of named steps ordered by what each one needs, not by its place in a list.

Each ``Step`` says which facts it ``needs`` and which it ``gives``; ``order`` runs a step
only after every step that gives one of its needs (a topological order; among steps that
could run next, the one declared first). A need nobody gives, a fact two steps give, or a
circle is refused when the pipeline is built, so an ordering constraint ("the metrics are
checked on the suite *after* exclusion") is data a test can read, not a line position.
Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

State = TypeVar("State")


@dataclass(frozen=True)
class Step(Generic[State]):
    name: str
    needs: frozenset[str]
    gives: frozenset[str]
    run: Callable[[State], None]


def step(
    name: str, needs: Sequence[str], gives: Sequence[str], run: Callable[[State], None]
) -> Step[State]:
    return Step(name, frozenset(needs), frozenset(gives), run)


class PipelineError(ValueError):
    """The steps cannot be ordered: a need nobody gives, a fact given twice, a circle."""


def order(steps: Sequence[Step[State]]) -> list[Step[State]]:
    """The steps in an order where each runs after the givers of its needs."""
    giver: dict[str, str] = {}
    for s in steps:
        for fact in s.gives:
            if fact in giver:
                raise PipelineError(f"{fact!r} is given by both {giver[fact]!r} and {s.name!r}")
            giver[fact] = s.name
    for s in steps:
        missing = sorted(s.needs - giver.keys())
        if missing:
            raise PipelineError(f"step {s.name!r} needs {missing[0]!r}, which no step gives")
    done: set[str] = set()
    ordered: list[Step[State]] = []
    waiting = list(steps)
    while waiting:
        ready = next((s for s in waiting if s.needs <= done), None)
        if ready is None:
            names = ", ".join(s.name for s in waiting)
            raise PipelineError(f"the steps {names} need each other (a circle)")
        waiting.remove(ready)
        ordered.append(ready)
        done |= ready.gives
    return ordered


def run(steps: Sequence[Step[State]], state: State) -> State:
    """Run every step on ``state`` in ``order``."""
    for s in order(steps):
        s.run(state)
    return state
