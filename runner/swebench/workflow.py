"""``deltarun import swebench``: import, then seal, validate, exclude, seal.

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

import yaml

from runner.atomic import write_atomic
from runner.bounded_input import load_yaml, read_capped
from runner.config.loader import CONTROLS_MAX_BYTES, load_controls
from runner.grading.validation import Verdict
from runner.paths import writable
from runner.run.service import RunService
from runner.run.validate import validate
from runner.suite.sealing import seal_target
from runner.swebench.importer import ImportOptions, import_swebench


def import_suite(
    options: ImportOptions,
    validate_n: int,
    parallel: int,
    service: RunService,
    say: Callable[[str], None],
) -> list[str]:
    """Import the instances (``import_swebench``, its lines to ``say``) and say what was
    written; then, unless the environments must be built first, seal and validate the suite
    (``seal_and_validate``, its lines to the service's events). The command to run next."""
    done = import_swebench(options, say)
    controls = done.out / "controls.yaml"
    negatives = f", {done.negatives} negative controls" if done.negatives else ""
    say(
        f"wrote {done.out}: {done.tasks} instances over {len(done.repositories)} repositories"
        f"{negatives}; arms {', '.join(done.arms)} (control {done.control})"
    )
    for arm, count in done.resolved_by_arm.items():
        say(f"  {arm}: a patch for {count} of {done.tasks} instances")
    if done.environments:
        say(
            f"{len(done.environments)} environments to build first: "
            f"deltarun build {controls} (then run)"
        )
        return []
    note = service.events.note
    seal_and_validate(controls, done.out / "gold", validate_n, service, note, parallel)
    return [f"next: deltarun run {controls} --out runs/{done.out.name}"]


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
        broken = [k for k, v in found.invalid.items() if v.verdict == "setup-broken"]
        if broken:
            say(
                f"{len(broken)} instance(s) are setup-broken: their tests never ran, so the "
                "setup, not the task, is at fault (fix it and import again):"
            )
        # Setup problems first: one fix often saves many instances.
        order = sorted(found.invalid.items(), key=lambda kv: kv[1].verdict != "setup-broken")
        for task_id, verdict in order:
            say(f"  excluded {task_id}: {verdict.verdict} ({verdict.detail})")
    digest, _ = seal_target(controls, load_controls, say)
    say(f"sealed with the validation: suite sha256 {digest}")
    return Sealed(digest, dict(found.invalid))


def write_exclude(controls: Path, task_ids: list[str]) -> None:
    """Put ``task_ids`` into the imported controls' ``suite.exclude`` (kept comments first)."""
    where = writable(controls.parent, controls.name, what="deltarun writes suite.exclude")
    text = read_capped(where, CONTROLS_MAX_BYTES, "a controls file").decode("utf-8")
    header = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))
    document = load_yaml(text)  # the import wrote it; read within bounds all the same
    document["suite"]["exclude"] = task_ids
    write_atomic(where, (header + yaml.safe_dump(document, sort_keys=False)).encode())
