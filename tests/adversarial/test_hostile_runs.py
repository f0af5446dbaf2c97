# ruff: noqa: F811  (pkg: the fixture of test_hostile_suites, imported to be shared)
"""Hostile run directories read by the viewer (`deltarun view RUN`): the ledger it scans is
the run directory's own file, read a bounded line at a time. The harness is
``test_hostile_suites``'s (outside files unchanged, the sentinel nowhere, one line)."""

from __future__ import annotations

from pathlib import Path

from tests.adversarial.test_hostile_suites import (  # noqa: F401  pkg is a fixture
    Held,
    pkg,
    refused,
)


def test_the_viewer_reads_no_ledger_through_a_link_out(
    tmp_path: Path, pkg: Path, held: Held
) -> None:
    """trials.jsonl a link to a JSON-lines file of the user's: the viewer's pages would
    carry its lines (the run page's matrix, each trial's page)."""
    from tests.test_report_input import make_run

    run = make_run(pkg)
    mine = tmp_path / "outside" / "trials.jsonl"
    mine.write_bytes((run / "trials.jsonl").read_bytes())
    (run / "trials.jsonl").unlink()
    (run / "trials.jsonl").symlink_to(mine)
    args = ["view", str(run), "--bundle", str(tmp_path / "bundle")]
    tried = "deltarun view --bundle of a run whose trials.jsonl is a link to a file outside"
    refused(tmp_path, held, "viewer: ledger a link out", tried, args, "trials.jsonl", "link")
    assert not list((tmp_path / "bundle").glob("data/trial/*.js"))


def test_a_stored_decision_is_parsed_bounded(tmp_path: Path, pkg: Path, held: Held) -> None:
    """decision.json is read back by replay: 100,000 nested lists are refused by the scan
    before json.loads recurses (once one line from the last resort, RecursionError)."""
    from tests.test_report_input import make_run

    run = make_run(pkg)
    (run / "decision.json").write_text("[" * 100_000 + "]" * 100_000)
    args = ["replay", str(run)]
    tried = "deltarun replay of a run whose decision.json nests 100,000 lists"
    needles = ("decision.json", "does not name criteria")
    refused(tmp_path, held, "replay: deep decision.json", tried, args, *needles, codes=(3,))
