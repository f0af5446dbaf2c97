"""The suite commands' steps: ``deltarun seal``, ``build`` and ``init``.

Each step function does the work and hands its lines back in the order a terminal
shows them: what belongs on stdout (digests, the table of environments, the next
commands) is yielded or returned; notes for stderr go to ``say`` as they happen.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from runner.config.loader import load_controls
from runner.errors import UsageError, UserError
from runner.sizes import parse_size
from runner.suite.scaffold import scaffold
from runner.suite.sealing import seal_target

if TYPE_CHECKING:
    from runner.sandbox.image_build import DockerImageBuilder

Say = Callable[[str], None]


def seal_steps(target: Path, strip_top_folder: bool, say: Say) -> Iterator[str]:
    """Seal ``target`` (``sealing.seal_target``): yields the suite digest, then says the
    files written and, when no controls file pins the digest, how to pin it."""
    digest, written = seal_target(target, load_controls, say, strip_top_folder)
    yield digest
    for path in written:
        say(f"wrote {path}")
    if target.suffix not in (".yaml", ".yml"):
        say(
            "no controls file was changed: a run checks the digest its controls pin, so seal "
            "through the controls to pin this one (deltarun seal controls.yaml)"
        )


@dataclass(frozen=True)
class BuildLimits:
    """What each environment's build may take: ``memory`` of each step, a size (None: half
    the machine's), ``pids``, the processes of each step at once (None:
    ``DEFAULT_BUILD_PIDS``), ``timeout_s`` in all (None: ``DEFAULT_DEADLINE_S``) and
    ``disk``, a size written in all (None: ``DEFAULT_BUILD_DISK``)."""

    memory: str | None = None
    timeout_s: float | None = None
    pids: int | None = None
    disk: str | None = None

    def builder(self) -> DockerImageBuilder:
        """A builder on the local engine whose every build keeps within these limits (an
        environment's, an installed agent's layer); ``--memory`` or ``--disk`` unreadable
        is a ``UsageError``."""
        from runner.sandbox.build_deadline import DEFAULT_DEADLINE_S
        from runner.sandbox.build_disk import DEFAULT_BUILD_DISK
        from runner.sandbox.build_steps import DEFAULT_BUILD_PIDS
        from runner.sandbox.engine import connect
        from runner.sandbox.image_build import BUILD_TIMEOUT_S, DockerImageBuilder

        memory = _size("--memory", self.memory)
        disk = _size("--disk", self.disk)
        if disk is not None and disk < 1 << 20:
            raise UsageError("--disk: a build writes its layers; give at least 1m")
        deadline = self.timeout_s or DEFAULT_DEADLINE_S
        pids = self.pids or DEFAULT_BUILD_PIDS
        client = connect(BUILD_TIMEOUT_S)
        return DockerImageBuilder(client, memory, deadline, pids, disk or DEFAULT_BUILD_DISK)


def _size(option: str, text: str | None) -> int | None:
    """The size ``text`` gives (None when not given); unreadable, a ``UsageError``."""
    try:
        return parse_size(text) if text is not None else None
    except ValueError as exc:
        raise UsageError(f"{option}: {exc}") from exc


def build_steps(
    target: Path,
    rebuild: bool,
    network: str,
    limits: BuildLimits,
    verbose: bool,
    terminal: bool,
    say: Say,
) -> Iterator[str]:
    """Build the suite's environments on the local engine (``runner.suite.build``), each
    within ``limits``: yields one line per environment, then the suite digest. ``say`` gets
    each step as it starts on a ``terminal`` or when ``verbose`` (elsewhere an error stays
    one line), the engine's output when ``verbose``, and the files written and the time
    taken at the end."""
    from runner.suite.build import build, resolve_target

    def progress(line: str) -> None:
        if verbose or terminal:
            say(line)

    def log(line: str) -> None:
        if verbose:
            say(f"  | {line}")

    started = time.monotonic()
    resolve_target(target)  # the paths the target names are checked before the engine is asked
    builder = limits.builder()
    result = build(target, builder, rebuild=rebuild, network=network, say=progress, log=log)
    for item in result.built:
        short_id = item.image_id.removeprefix("sha256:")[:12]
        how = "reused" if item.reused else "built"
        yield f"{item.name}  {item.tag}  {short_id}  {how}  {item.seconds:.1f}s"
    if not result.built:
        say(f"{target}: no task names an environment; sealed only")
    yield result.suite_sha256
    for path in result.written:
        say(f"wrote {path}")
    say(f"{len(result.built)} environment(s) in {time.monotonic() - started:.1f}s")


def init_steps(directory: Path, say: Say) -> list[str]:
    """Write the starter suite (``scaffold``), build its tars with its own build_suite.py,
    seal it; the commands to run next."""
    scaffold(directory)
    built = subprocess.run(
        [sys.executable, "build_suite.py"], cwd=directory, capture_output=True, text=True
    )
    if built.returncode != 0:
        raise UserError(f"{directory}/build_suite.py failed: {built.stderr.strip()[-300:]}")
    controls = directory / "controls.yaml"
    digest, _ = seal_target(controls, load_controls, say)
    say(f"wrote {directory}: suite sealed ({digest[:12]}); next:")
    return [
        f"  {step}"
        for step in (
            f"deltarun validate {controls}",
            f"deltarun run {controls} --out runs/my-suite",
            "edit src/, then: python3 build_suite.py && deltarun seal controls.yaml",
        )
    ]
