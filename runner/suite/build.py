"""``deltarun build``: each environment of a suite built (or reused) on the base image,
checked, tagged and pinned into tasks.jsonl, then the suite sealed as the CLI does.

The environment contexts, digests and pins are ``runner.suite.environments``; the engine is
reached through the ``ImageBuilder`` protocol (``runner.sandbox.images``).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from runner.config.controls import Controls
from runner.config.loader import load_controls
from runner.config.runtime import Runtime
from runner.errors import DeltarunError, UsageError, UserError
from runner.paths import inside
from runner.records import environment_tag
from runner.sandbox.image_config import trigger_refusal, volume_refusal
from runner.sandbox.images import BuildRequest, ImageBuilder, ImageBuildFailed, ImageInfo
from runner.suite.dockerfile_screen import first_problem
from runner.suite.environments import (
    BASE_LABEL,
    CONTEXT_LABEL,
    ENVIRONMENT_LABEL,
    FIX_FROM,
    NETWORKS,
    ContextEntry,
    Pin,
    context_digest,
    context_dir,
    context_entries,
    environments_of,
    pin_lines,
    require_dockerfile,
    task_line_numbers,
    write_context_tar,
)
from runner.suite.lines import task_lines
from runner.suite.load import read_tasks, write_tasks
from runner.suite.sealing import seal_target


def write_pins(tasks_path: Path, pins: Mapping[str, Pin]) -> bool:
    """Write the pins into tasks.jsonl atomically; False when every line was already right."""
    lines = [line.text for line in task_lines(tasks_path)]
    return write_tasks(tasks_path, ("\n".join(pin_lines(lines, pins)) + "\n").encode("utf-8"))


@dataclass(frozen=True)
class Built:
    """One environment after ``build``: its tag, image ID, whether reused, and seconds."""

    name: str
    context_sha256: str
    tag: str
    image_id: str
    reused: bool
    seconds: float


@dataclass(frozen=True)
class BuildResult:
    built: list[Built]
    suite_sha256: str
    written: list[Path]


def on_base(layers: Sequence[str], base_layers: Sequence[str]) -> bool:
    """An image is built on the base when its layers start with all of the base's."""
    return len(layers) >= len(base_layers) and tuple(layers[: len(base_layers)]) == tuple(
        base_layers
    )


def resolve_target(target: Path) -> tuple[Path, Controls | None]:
    """tasks.jsonl and the controls (if given) of a suite folder, tasks.jsonl or controls."""
    if target.is_dir():
        return inside(target, "tasks.jsonl", file=target, field="tasks.jsonl"), None
    if target.suffix in (".yaml", ".yml"):
        loaded = load_controls(target)
        return loaded.suite_path, loaded.controls
    if target.is_file():
        return target, None
    raise UserError(f"{target}: not found; pass a suite directory, tasks.jsonl or controls.yaml")


def build(
    target: Path,
    builder: ImageBuilder,
    *,
    rebuild: bool = False,
    network: str = "none",
    say: Callable[[str], None] = lambda line: None,
    log: Callable[[str], None] = lambda line: None,
) -> BuildResult:
    """Build (or reuse) every environment the suite names, pin them, and seal the suite
    (and the controls' ``suite.sha256`` when ``target`` is a controls file, as ``seal`` does).

    ``say`` gets a line as each step starts, ``log`` every line of the engine's build output.
    """
    from runner.config.runtime import Runtime

    if network not in NETWORKS:
        raise UsageError(f"--network {network!r}: choose one of {', '.join(NETWORKS)}")
    tasks_path, controls = resolve_target(target)
    runtime = controls.runtime if controls is not None else Runtime()
    tasks = read_tasks(tasks_path)
    named = environments_of(tasks)
    built: list[Built] = []
    if named:
        first = dict(zip((t.id for t in tasks), task_line_numbers(tasks_path), strict=True))
        session = _Session(builder, _base(builder, runtime.image), runtime, network, rebuild)
        for name, users in named.items():
            line = f"{tasks_path}:{first[users[0].id]}"
            root = context_dir(tasks_path, name, line)
            require_dockerfile(root, f"{line}: environment {name!r}")
            built.append(session.environment(name, root, say, log))
        write_pins(tasks_path, {b.name: Pin(b.context_sha256, b.image_id) for b in built})
    digest, written = seal_target(target, load_controls)
    return BuildResult(built, digest, written)


def _base(builder: ImageBuilder, image: str) -> ImageInfo:
    """The sandbox base every environment is built on: runtime.image (default the Python one)."""
    base = builder.inspect(image)
    if base is None:
        raise UserError(
            f"base image {image!r} (runtime.image) is not present on this machine; build it "
            "with `make images`, then run `deltarun build` again"
        )
    refused = trigger_refusal(f"{image!r} (runtime.image)", base.triggers)
    if refused is not None:
        raise UserError(refused)
    return base


@dataclass(frozen=True)
class _Session:
    """One ``deltarun build``: the engine, the base, the run's limits, and the options."""

    builder: ImageBuilder
    base: ImageInfo
    runtime: Runtime
    network: str
    rebuild: bool

    def environment(
        self, name: str, root: Path, say: Callable[[str], None], log: Callable[[str], None]
    ) -> Built:
        """Reuse the tagged image of this context, or build, check and tag a new one."""
        started = time.monotonic()
        entries = context_entries(root)
        digest = context_digest(entries)
        tag = environment_tag(name, digest)
        self._screen(name, root / "Dockerfile")  # before a reuse too: under today's rules
        have = None if self.rebuild else self.builder.inspect(tag)
        if (
            have is not None
            and have.labels.get(CONTEXT_LABEL) == digest
            and on_base(have.layers, self.base.layers)
        ):
            _refuse_config(f"{root / 'Dockerfile'}: environment {name!r}", have)
            return Built(name, digest, tag, have.id, True, time.monotonic() - started)
        say(f"{name}: building {tag} on {self.base.id[:19]}")
        image = self._build(name, root, entries, digest, log)
        try:
            self._check_contract(name, root, image)
        except DeltarunError:
            self.builder.remove(image)
            raise
        self.builder.tag(image, tag)
        return Built(name, digest, tag, image, False, time.monotonic() - started)

    def _build(
        self,
        name: str,
        root: Path,
        entries: Sequence[ContextEntry],
        digest: str,
        log: Callable[[str], None],
    ) -> str:
        """Send the context exactly as digested; a failed build is one line with its log's end."""
        request = BuildRequest(
            buildargs={"BASE": self.base.id},
            labels={ENVIRONMENT_LABEL: name, CONTEXT_LABEL: digest, BASE_LABEL: self.base.id},
            network=self.network,
            nocache=self.rebuild,
        )
        with tempfile.TemporaryFile() as handle:
            write_context_tar(entries, handle)
            handle.seek(0)
            try:
                return self.builder.build(handle, request, log)
            except ImageBuildFailed as exc:
                offline = (
                    "; it was built with no network (the default): put what a step fetches "
                    "in the context, or `deltarun build --network default` for a suite you trust"
                    if self.network == "none" and not exc.at_limit
                    else ""
                )
                raise UserError(
                    f"{root / 'Dockerfile'}: environment {name!r} did not build: {exc}{offline}"
                ) from exc

    def _screen(self, name: str, dockerfile: Path) -> None:
        """The Dockerfile reaches nothing outside its context and the base
        (``runner.suite.dockerfile_screen``): one line naming the line and the fix."""
        text = dockerfile.read_bytes().decode("utf-8", errors="replace")  # capped: a context
        problem = first_problem(text, (self.runtime.image, self.base.id))
        if problem is not None:
            raise UserError(
                f"{dockerfile}:{problem.line}: environment {name!r}: {problem.why}; {problem.fix}"
            )

    def _check_contract(self, name: str, root: Path, image: str) -> None:
        """The new image sits on the base and passes the sandbox preflight."""
        info = self.builder.inspect(image)
        where = f"{root / 'Dockerfile'}: environment {name!r}"
        if info is None or not on_base(info.layers, self.base.layers):
            raise UserError(
                f"{where}: the image is not built on the sandbox base {self.base.id[:19]}; "
                f"{FIX_FROM} (deltarun build passes the base's image ID as BASE)"
            )
        _refuse_config(where, info)
        try:
            self.builder.preflight(image, self.runtime)
        except UserError as exc:
            raise UserError(f"{where}: the image breaks the sandbox contract: {exc}") from exc


def _refuse_config(where: str, image: ImageInfo) -> None:
    """One line when the environment's image declares a volume or carries ONBUILD triggers
    (``runner.sandbox.image_config``)."""
    name = image.id[:19]
    refused = volume_refusal(name, image.volumes) or trigger_refusal(name, image.triggers)
    if refused is not None:
        raise UserError(f"{where}: {refused}")
