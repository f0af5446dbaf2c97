"""Run directories written by earlier code replay into the same bytes with today's code.

``tests/fixtures/run-quickstart`` is a real ``make demo`` run and
``tests/fixtures/run-features`` a synthetic one that exercises every part of the
report (``make_run_features.py`` says how it was made). Their report files were
written when they were committed; a change to scoring or rendering that alters
a byte of them fails here, as it would fail a user's ``deltarun replay``
(``run-features`` has an arm with both baseline legs, so its scorecard.json too).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import run_cli

FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.mark.parametrize("name", ["run-quickstart", "run-features"])
def test_a_committed_run_replays_byte_for_byte(name: str, tmp_path: Path) -> None:
    run = tmp_path / name
    shutil.copytree(FIXTURES / name, run)
    names = ["report.md", "report.json", "report.html", "scorecard.json"]
    before = {f: (run / f).read_bytes() for f in names if (run / f).exists()}
    assert len(before) >= 3
    result = run_cli("replay", str(run))
    assert result.returncode == 0, result.stderr
    assert "identical" in result.stdout + result.stderr
    assert {f: (run / f).read_bytes() for f in before} == before
