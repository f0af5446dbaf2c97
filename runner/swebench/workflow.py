"""``deltarun import swebench`` after the import itself: seal, validate, exclude, seal.

The importer (``runner.swebench.importer``) writes the suite; a suite whose
environments are built needs ``deltarun build`` first, and otherwise is sealed
here. With ``--validate N`` every instance is validated N times through the run
service (gold patch passes, no patch fails), the invalid ones are written into
``suite.exclude`` and the suite is sealed again with its validation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from runner.config.loader import load_controls
from runner.grading.validation import Verdict
from runner.run.service import RunService
from runner.run.validate import validate
from runner.suite.sealing import seal_target
from runner.swebench.importer import write_exclude


@dataclass(frozen=True)
class Sealed:
    """The suite's digest at the end, and the instances excluded as not valid."""

    digest: str
    excluded: dict[str, Verdict]


def seal_and_validate(
    controls: Path,
    gold: Path,
    validate_n: int,
    service: RunService,
    say: Callable[[str], None],
    parallel: int = 2,
) -> Sealed:
    """Seal the imported suite; with ``validate_n``, validate it, exclude what is not
    valid and seal it again (pinning the validation)."""
    digest, _ = seal_target(controls, load_controls, say)
    say(f"sealed: suite sha256 {digest}")
    if not validate_n:
        return Sealed(digest, {})
    found = validate(controls, gold, validate_n, service, parallel=parallel)
    if found.invalid:
        write_exclude(controls, sorted(found.invalid))
        for task_id, verdict in found.invalid.items():
            say(f"  excluded {task_id}: {verdict.verdict} ({verdict.detail})")
    digest, _ = seal_target(controls, load_controls, say)
    say(f"sealed with the validation: suite sha256 {digest}")
    return Sealed(digest, dict(found.invalid))
