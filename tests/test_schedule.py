"""The order tests are handed out in (tests/conftest.py): every test the schedule names
exists, so a renamed or moved one is not silently handed out late again."""

from __future__ import annotations

import itertools
from pathlib import Path

from tests.conftest import (
    FIRST,
    LONGEST,
    SLOW_FIRST,
    WAIT_GAP,
    WAITING,
    schedule_name,
    spread_waiting,
)

TESTS = Path(__file__).resolve().parent


def _sources(name: str) -> list[str]:
    """The text of each test module of that file name (the schedule goes by file name:
    tests/ and tests/adversarial/ may both have one)."""
    return [
        path.read_text(encoding="utf-8")
        for path in TESTS.rglob(name)
        if "fixtures" not in path.relative_to(TESTS).parts
    ]


def test_every_test_the_schedule_names_exists() -> None:
    for key in LONGEST:
        module, function = key.split("::")
        assert any(f"\ndef {function}(" in text for text in _sources(module)), key


def test_every_module_the_schedule_names_exists() -> None:
    for name in (*SLOW_FIRST, FIRST):
        sources = _sources(name)
        assert sources and all("\ndef test_" in text for text in sources), name


def test_the_longest_tests_go_first_longest_first() -> None:
    seconds = list(LONGEST.values())
    assert seconds == sorted(seconds, reverse=True)


class _Item:
    """What the schedule reads of a collected test."""

    def __init__(self, name: str, exclusive: bool = False) -> None:
        module, self.originalname = name.split("::")
        self.name, self.path = self.originalname, TESTS / module
        self.exclusive = exclusive

    def get_closest_marker(self, name: str) -> object:
        return True if name == "exclusive" and self.exclusive else None


def test_the_tests_that_mostly_wait_are_long_ones_and_go_out_apart() -> None:
    assert LONGEST.keys() >= WAITING
    exclusive = [_Item(f"test_gc.py::test_{n}", exclusive=True) for n in range(3)]
    longest = [_Item(name) for name in LONGEST]  # in schedule order: the waiting ones close
    rest = [_Item(f"test_x.py::test_{n}") for n in range(50)]
    items = [*exclusive, *longest, *rest]
    spread = spread_waiting(items)  # type: ignore[arg-type]
    assert sorted(map(id, spread)) == sorted(map(id, items))  # all of them, once
    assert spread[:4] == [*exclusive, longest[0]]  # the exclusive tests, then the longest
    places = [n for n, item in enumerate(spread) if schedule_name(item) in WAITING]
    assert len(places) == len(WAITING) and places[0] == 4
    assert all(b - a == WAIT_GAP + 1 for a, b in itertools.pairwise(places)), places
    others = [item for item in spread if schedule_name(item) not in WAITING]
    assert others == [
        item for item in items if schedule_name(item) not in WAITING
    ]  # in their order
