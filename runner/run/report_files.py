"""The report's files in a run directory: written after a run (and checked by deriving the
report again from disk), replayed byte for byte later. The report itself is built, without
writing anything, by ``runner.report.assemble``."""

from __future__ import annotations

import json
from pathlib import Path

from runner.bounded_input import read_capped
from runner.bounded_json import BoundsError, JsonBounds, loads_bounded
from runner.errors import DigestMismatch, UserError
from runner.paths import inside
from runner.report.assemble import EDITS_FILE, BuiltReport, build_report
from runner.report.headline import headline
from runner.store.rundir import RunDir


def write_report(run_dir: RunDir) -> tuple[BuiltReport, list[Path]]:
    """Write the report, then derive it again from what is on disk (the ledger, run.json
    and controls as a replay reads them); a different result fails the checklist's
    replay row, and the report is written again saying so."""
    built = build_report(run_dir)
    paths = [run_dir.write_file(name, text) for name, text in built.files()]
    if build_report(run_dir).files() != built.files():
        built = build_report(run_dir, replay_ok=False)
        paths = [run_dir.write_file(name, text) for name, text in built.files()]
    return built, paths


def replay(run_dir: RunDir, accept_edits: bool = False) -> BuiltReport:
    """Rebuild the report and require it to equal the stored files byte for byte.

    A ledger edited since the report was written fails with exit 3, unless
    ``accept_edits``: then the edit is recorded in ``edits.json`` and the rebuilt
    report carries a stamp saying so (and its checklist fails the replay row).
    """
    stored_json = run_dir.path / "report.json"
    reported = None
    if stored_json.is_file():
        try:
            data = loads_bounded(_stored(run_dir, "report.json"), REPORT_BOUNDS)
            reported = data["pins"]["ledger_sha256"]
        except (ValueError, KeyError, TypeError):  # BoundsError is a ValueError
            reported = None
    current = run_dir.ledger_sha256()
    if reported is not None and reported != current and not (run_dir.path / EDITS_FILE).exists():
        if not accept_edits:
            raise DigestMismatch(
                f"{run_dir.ledger_path}: digest {current} differs from the {reported} the report "
                "was built from; the ledger was edited after the run (pass --accept-edits to "
                "rebuild a report stamped as edited)"
            )
        run_dir.write_file(
            EDITS_FILE,
            json.dumps(
                {"reported_ledger_sha256": reported, "ledger_sha256": current},
                indent=2,
                sort_keys=True,
            )
            + "\n",
        )
    elif accept_edits and (run_dir.path / EDITS_FILE).exists():
        try:
            data = loads_bounded(_stored(run_dir, EDITS_FILE), REPORT_BOUNDS)
        except BoundsError as exc:
            raise UserError(f"{run_dir.path / EDITS_FILE}: unreadable ({exc})") from None
        if not isinstance(data, dict):
            raise UserError(f"{run_dir.path / EDITS_FILE}: not an object deltarun wrote")
        if data.get("ledger_sha256") != current:
            data["ledger_sha256"] = current
            run_dir.write_file(EDITS_FILE, json.dumps(data, indent=2, sort_keys=True) + "\n")
    built = build_report(run_dir)
    for name, text in built.files():
        path = run_dir.path / name
        if not path.is_file() or accept_edits:
            run_dir.write_file(name, text)
            continue
        if _stored(run_dir, name) != text.encode("utf-8"):
            raise DigestMismatch(
                f"{path}: the replayed report differs from the stored one; the report or the "
                "run directory was changed after the run"
            )
    return built


REPORT_BOUNDS = JsonBounds(max_bytes=256 << 20, max_depth=64, max_items=50_000_000)


def _stored(run_dir: RunDir, name: str) -> bytes:
    """A report file the run directory holds, read as input: inside it (a link out is
    refused), a regular file, capped."""
    held = inside(run_dir.path, name, file=run_dir.path, field=name)
    return read_capped(held, REPORT_BOUNDS.max_bytes, "a report file")


def report_headline(run_dir: Path) -> list[str]:
    """Write the run's report (``build.write_report``); its headline and files."""
    built, paths = write_report(RunDir(run_dir))
    return headline(built, paths)
