# ruff: noqa: F811  (pkg: the fixture of test_hostile_suites, imported to be shared)
"""Hostile suites, more variants (``test_hostile_suites`` holds the first ones and the
harness these share): files a suite names that are not regular files or claim sizes no
suite needs, run directories and kits read as input, and folders deltarun writes a suite
into. Each is driven through the real command line with no reachable Docker engine and
must end in one line and a fixed exit code, leave every outside file as it was and the
sentinel nowhere; none may wait on a FIFO or read a sparse file of terabytes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.adversarial.test_hostile_suites import (  # noqa: F401  pkg is a fixture
    BAD,
    COMMANDS,
    Held,
    edit_controls,
    edit_task,
    pkg,
    refused,
)

HUGE = 1 << 40  # a sparse file of a terabyte: costs its author nothing


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _hidden_fifo(pkg: Path) -> None:
    _fifo(pkg / "suite" / "hidden" / "t1.tar")


def _fixture_fifo(pkg: Path) -> None:
    _fifo(pkg / "suite" / "fixtures" / "t1.tar")


def _hidden_sparse(pkg: Path) -> None:
    os.truncate(pkg / "suite" / "hidden" / "t1.tar", HUGE)


def _fixture_sparse_gzip(pkg: Path) -> None:
    """A gzip header, then a terabyte of holes: a plain read never ends."""
    path = pkg / "suite" / "fixtures" / "t1.tar"
    path.write_bytes(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03")
    os.truncate(path, HUGE)


def _tasks_fifo(pkg: Path) -> None:
    edit_controls(pkg, lambda c: c["suite"].update(sha256=BAD))
    _fifo(pkg / "suite" / "tasks.jsonl")


SPECIAL = {
    "hidden archive a FIFO": (_hidden_fifo, "hidden/t1.tar", "not a regular file"),
    "fixture archive a FIFO": (_fixture_fifo, "fixtures/t1.tar", "not a regular file"),
    "hidden archive a sparse terabyte": (_hidden_sparse, "hidden/t1.tar", "over the cap"),
    "fixture a sparse terabyte of gzip": (_fixture_sparse_gzip, "fixtures/t1.tar", "over the cap"),
    "tasks.jsonl a FIFO": (_tasks_fifo, "tasks.jsonl", "not a regular file"),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("attack", sorted(SPECIAL))
def test_suite_files_are_regular_and_capped_before_a_read(
    tmp_path: Path, pkg: Path, held: Held, attack: str, command: str
) -> None:
    make, needle, reason = SPECIAL[attack]
    make(pkg)
    if "tasks.jsonl" not in attack:  # pinned as the hostile author would
        edit_task(pkg)
    args = COMMANDS[command](pkg, tmp_path)
    tried = f"deltarun {command} with {attack}"
    refused(tmp_path, held, f"suite file: {attack}", tried, args, needle, reason, codes=(1,))


def test_a_scored_run_reads_a_capped_validation_only(tmp_path: Path, pkg: Path, held: Held) -> None:
    """validation.json is read by a scored run; a FIFO there is refused, not waited on."""
    os.mkfifo(pkg / "suite" / "validation.json")

    def scored(c: dict[str, object]) -> None:
        c["channel"] = "scored"
        c["suite"]["validation"] = BAD  # type: ignore[index]

    edit_controls(pkg, scored)
    args = COMMANDS["run"](pkg, tmp_path)
    tried = "deltarun run, channel scored, suite/validation.json a FIFO"
    needles = ("validation.json", "not a regular file")
    refused(tmp_path, held, "suite file: validation.json a FIFO", tried, args, *needles, codes=(1,))
