"""The digest of the code a run's numbers rest on: deltarun's grading, scoring and report
packages (``runner/grading``, ``runner/evidence``, ``runner/report``), every ``.py`` file
by its path. Recorded in run.json, printed by ``deltarun --version``, and checked by a
kit's replay.sh, so a rerun with other scoring code is caught even at the same version."""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

PACKAGES = ("evidence", "grading", "report")


@cache
def scoring_sha256() -> str:
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            data = path.read_bytes()
            digest.update(f"{rel}\0{len(data)}\0".encode())
            digest.update(data)
    return digest.hexdigest()
