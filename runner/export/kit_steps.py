"""``deltarun export``: the kit written (``runner.export.kit``), then how to use it."""

from __future__ import annotations

from pathlib import Path

from runner.export.kit import export_kit
from runner.store.rundir import RunDir


def export_steps(run_dir: Path, kit: Path, controls: Path | None) -> list[str]:
    """Write the kit of ``run_dir`` into ``kit``; what was checked, and the two commands
    that rerun the kit and re-verify its verdicts."""
    made = export_kit(RunDir(run_dir), kit, controls)
    script = kit / "replay.sh"
    return [
        f"kit {kit}: run {made.run_id}, protocol {made.protocol_sha256[:12]}, "
        f"suite {made.suite_sha256[:12]}, {made.files} files digest-checked "
        f"(controls: {made.controls})",
        f"rerun and compare: sh {script}",
        f"re-verify verdicts: sh {script} --verify-only",
    ]
