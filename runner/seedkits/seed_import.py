"""``deltarun import seed000`` / ``seed004``: read and map the seed (every problem one line,
before anything is written), check seed 000's Python pin in the image, write the suite
and its controls into a fresh folder, seal them there, and only then make it ``--out``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.config.loader import load_controls
from runner.seedkits.protocol import read_protocol
from runner.seedkits.python_pin import pin_python
from runner.seedkits.seed_arms import GivenArm, given_arms
from runner.seedkits.seed_kit import read_kit
from runner.seedkits.writer import (
    SANDBOX_IMAGE,
    Plan,
    check_out,
    checked_controls,
    controls_document,
    staged,
    summary,
    write_plan,
)
from runner.suite.sealing import seal_target


@dataclass(frozen=True)
class ImportRequest:
    """What both imports are asked besides the seed itself."""

    out: Path
    arms: tuple[str, ...] = ()  # --arm NAME=DIR
    commands: tuple[str, ...] = ()  # --command NAME=ARGV
    image: str = SANDBOX_IMAGE  # runtime.image
    control: str | None = None  # seed 004: --control NAME


def import_seed000(
    protocol: Path, tasks: Path | None, request: ImportRequest, say: Callable[[str], None]
) -> list[str]:
    """A seed-000 protocol (and its tasks) into a sealed suite; the lines to print last."""
    check_out(request.out)
    given = given_arms(request.arms, request.commands)
    notes: list[str] = []  # said once the whole import is known to go through
    plan = read_protocol(protocol, tasks, given, request.image, notes.append)
    document = controls_document(plan, given, plan.control)
    controls = checked_controls(document, f"{protocol} (as deltarun controls)")
    if plan.python is not None:
        pin = pin_python(controls, plan.python, str(protocol))
        document["images"] = {pin.image: pin.image_id}
        document["runtime"] = {**document["runtime"], "python": plan.python}  # every run too
        notes.append(
            f"runtime.python {plan.python}: image {pin.image} has Python {pin.found}; "
            f"pinned by ID as images.{pin.image}: {pin.image_id}"
        )
    return _write_and_seal(plan, document, given, request.out, notes, say)


def import_seed004(kit: Path, request: ImportRequest, say: Callable[[str], None]) -> list[str]:
    """A seed-004 kit folder into a sealed suite; the lines to print last."""
    check_out(request.out)
    given = given_arms(request.arms, request.commands)
    notes: list[str] = []
    plan = read_kit(kit, request.control, request.image, notes.append)
    document = controls_document(plan, given, plan.control)
    checked_controls(document, f"{kit / 'controls.yaml'} (as deltarun controls)")
    return _write_and_seal(plan, document, given, request.out, notes, say)


def _write_and_seal(
    plan: Plan,
    document: dict[str, Any],
    given: Sequence[GivenArm],
    out: Path,
    notes: Sequence[str],
    say: Callable[[str], None],
) -> list[str]:
    """Write and seal in a fresh folder that becomes ``out``; the warnings gathered while
    reading are said first, so a refused import prints its one error line alone."""
    for note in notes:
        say(note)
    with staged(out) as work:
        controls = write_plan(plan, document, given, work)
        # Sealed where it is written; its lines name the paths it will have.
        digest, _ = seal_target(controls, load_controls, lambda line: say(_moved(line, work, out)))
    summary(plan, document, out, say)
    say(f"sealed: suite sha256 {digest}")
    controls = out / "controls.yaml"
    return [f"next: deltarun run {controls} --out runs/{out.name}"]


def _moved(line: str, work: Path, out: Path) -> str:
    """``line`` naming ``out`` where it names the folder the import is written in."""
    return line.replace(str(work.resolve()), str(out.resolve())).replace(str(work), str(out))
