"""An error line never carries terminal escapes (issue 38, item 4): foreign output quoted
in an error (a Docker build's log) reads as its text, its escape sequences dropped, and
no control character reaches the terminal."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runner.bounded_input import MAX_MESSAGE, one_line, without_escapes
from tests.conftest import run_cli
from tests.test_environments import tiny_suite

ESCAPE_PIECES = st.sampled_from(
    ["\x1b[31m", "\x1b[0m", "\x1b[1;32;40m", "\x1b]0;title\x07", "\x1b]8;;http://h\x1b\\",
     "\x1b[2K\r", "\x1b(B", "\x9b33m", "\x1b", "\x1b[", "\x07", "\r", "\n", "\t", "\x00",
     "\x7f", "\x85", "pip ", "ERROR: ", "é", "\u2028", "\ud800"]
)  # fmt: skip
TEXT = st.lists(st.one_of(ESCAPE_PIECES, st.text(max_size=8)), max_size=40).map("".join)


@given(TEXT)
def test_one_line_holds_no_control_character_and_no_escape(text: str) -> None:
    line = one_line(text)
    assert "\x1b" not in line and "\x9b" not in line
    assert all(ch.isprintable() for ch in line), repr(line)
    assert len(line) <= MAX_MESSAGE


def test_escape_sequences_are_dropped_whole_and_the_text_kept() -> None:
    assert one_line("\x1b[31mERROR\x1b[0m: no \x1b[1mwheel\x1b[22m") == "ERROR: no wheel"
    assert one_line("\x1b]0;pip\x07done") == "done"
    assert without_escapes("a\tb\x1b[Kc") == "a\tbc"  # other controls stay, for one_line
    assert one_line("a\tb\nc") == "a\\tb\\nc"


def test_a_failed_build_prints_its_log_without_escapes(tmp_path: Path, docker_api: Any) -> None:
    """A real build whose RUN step prints colours and a window title, then fails: the
    error line quotes its output as text, on one line, with no control character."""
    name = f"escapes-{uuid.uuid4().hex[:8]}"
    dockerfile = (
        "ARG BASE\nFROM ${BASE}\n"
        "RUN printf '\\033[31mboom\\033[0m in red\\n\\033]0;a title\\007after\\n'; exit 3\n"
    )
    controls = tiny_suite(tmp_path, name, dockerfile)
    result = run_cli("build", str(controls))
    assert result.returncode == 1, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "| boom in red | after |" in lines[0], lines[0]
    assert "\x1b" not in result.stderr and "\\x1b" not in result.stderr
    assert all(ch.isprintable() for ch in lines[0]), repr(lines[0])
    verbose = run_cli("build", "-v", str(controls))
    assert verbose.returncode == 1
    assert "boom in red" in verbose.stderr and "\x1b" not in verbose.stderr


def test_lines_on_stdout_and_stderr_are_printed_as_written(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A parametrised test id's brackets are not markup, a ``:name:`` is not an emoji, a
    colour is dropped and a carriage return shown escaped, on both consoles."""
    from runner.cli import common

    line = "tests/t.py::test_x[abc] \x1b[31mfailed\x1b[0m :smile: [bold]x[/bold]\rover"
    expected = "tests/t.py::test_x[abc] failed :smile: [bold]x[/bold]\\rover"
    common.say([line])
    common.tell(line)
    common.Lines().note(line)
    found = capsys.readouterr()
    assert found.out == expected + "\n"
    assert found.err == (expected + "\n") * 2
