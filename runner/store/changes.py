"""The verdicts ``deltarun replay --reverify`` last changed, kept beside the ledger.

``reverify.json``, replaced whole and atomically by each re-verification; ``deltarun view``
filters and marks those trials:

    {"ran_at": ISO time, "ledger_sha256": the ledger re-verified, "checked": N,
     "changed": {job_id: {"task_id", "arm", "repeat", "was": outcome, "now": outcome}}}

``was`` is the recorded outcome (success or miss), ``now`` the re-run's. No report file is
touched: ``deltarun replay`` still rebuilds them byte for byte, and ``deltarun export``
leaves the file out of a kit's evidence.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from runner.atomic import write_atomic
from runner.errors import UserError
from runner.records import Outcome, Trial
from runner.store.rundir import RunDir

CHANGES = "reverify.json"


@dataclass(frozen=True)
class Changed:
    trial: Trial
    now_passed: bool

    @property
    def now(self) -> str:
        """The re-run's outcome: its hidden tests pass on the patch, or they do not."""
        return (Outcome.SUCCESS if self.now_passed else Outcome.MISS).value


def changes_json(
    ran_at: datetime, ledger_sha256: str, checked: int, changed: list[Changed]
) -> dict[str, Any]:
    """``CHANGES``'s content: when, on which ledger, how many re-run, and what changed,
    by job id."""
    return {
        "ran_at": ran_at.isoformat(),
        "ledger_sha256": ledger_sha256,
        "checked": checked,
        "changed": {
            item.trial.job_id: {
                "task_id": item.trial.task_id,
                "arm": item.trial.arm,
                "repeat": item.trial.repeat,
                "was": item.trial.outcome.value,
                "now": item.now,
            }
            for item in changed
        },
    }


def keep_changes(run_dir: RunDir, data: dict[str, Any]) -> Path:
    """Replace ``CHANGES`` in the run directory with ``data``, atomically."""
    path = run_dir.path / CHANGES
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    try:
        write_atomic(path, text.encode("utf-8"))
    except OSError as exc:
        raise UserError(
            f"{path}: cannot keep the re-verification's changes ({exc.strerror or exc}); "
            "make the run directory writable"
        ) from exc
    return path
