"""The order tests are handed out in (tests/conftest.py): every test the schedule names
exists, so a renamed or moved one is not silently handed out late again."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import FIRST, LONGEST, SLOW_FIRST

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
