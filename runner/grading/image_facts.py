"""What a sandbox image can import, asked of the image itself, once per image per machine.

The grading policy drops a patch's new top-level module when its name is one the
image already imports (``runner.grading.patch_policy``), and the verify phase loads the
image's installed pytest plugins explicitly, plugin autoloading being off (so none
can come from the workspace). Neither list is typed by hand: ``image_modules.py``
makes both inside a fresh sandbox of the image, with the image's own interpreter,
isolated from any working directory. The answer is kept by image ID and the script's
digest (both content addresses, so a kept answer can never be stale): in this process,
and on disk in the deltarun cache (``runner.trees.kept``), so
another process on this machine (the next run, a worker's other pool processes) does not
probe the image again. A kept answer is read through the same checks as a fresh one; one
that fails them is probed again. The answer is the same on every worker and in
``replay --reverify``.
"""

from __future__ import annotations

import hashlib
import posixpath
import threading
from dataclasses import dataclass
from pathlib import Path

from runner.bounded_json import BoundsError, JsonBounds, loads_bounded
from runner.errors import InfraError
from runner.sandbox.base import ROOT_USER, WORKSPACE, ExecRequest, SandboxFactory, SandboxSpec
from runner.sandbox.end_mark import run_whole
from runner.sandbox_scripts import source
from runner.sandbox_scripts.image_modules import MAX_LINKS  # the script lists at most as many
from runner.trees.archives import single_file_tar
from runner.trees.kept import keep, kept_path, machine_lock, read_kept

SCRIPT = "image_modules.py"  # runner/sandbox_scripts/image_modules.py
_LOCK = threading.Lock()
_FACTS: dict[str, ImageFacts] = {}
_PROBING: dict[str, threading.Lock] = {}  # one probe at a time per image ID in this process
_BOUNDS = JsonBounds(max_bytes=8 << 20, max_depth=3, max_items=1_000_000)


@dataclass(frozen=True)
class ImageFacts:
    """The top-level module names an image can import, its pytest plugins' modules, and
    its bytecode of what the harness imports: (path below a pycache prefix, the image's
    ``.pyc``) pairs, each file one only root can write (``image_modules.py``)."""

    modules: frozenset[str]
    pytest_plugins: tuple[str, ...]
    bytecode: tuple[tuple[str, str], ...] = ()
    install_bytecode: tuple[tuple[str, str], ...] = ()  # what pip and setuptools add


def image_facts(sandboxes: SandboxFactory, spec: SandboxSpec, image_id: str) -> ImageFacts:
    """What the image of ``spec`` (ID ``image_id``) has: asked once per machine (kept in
    this process and in the deltarun cache). Trials that want the same image's facts at
    the same time, in this process's threads or in other processes sharing the cache (a
    worker's pool), wait for one probe and read its answer."""
    with _LOCK:
        known = _FACTS.get(image_id)
        if known is not None:
            return known
        gate = _PROBING.setdefault(image_id, threading.Lock())
    with gate:
        with _LOCK:
            known = _FACTS.get(image_id)
        if known is not None:
            return known  # probed by the thread this one waited for
        kept = _kept_path(image_id)
        with machine_lock(kept):
            facts = _read_kept(kept, spec.image)
            if facts is None:
                output = _probe(sandboxes, spec)
                facts = _parse(output, spec.image)
                keep(kept, output)
        with _LOCK:
            _FACTS[image_id] = facts
    return facts


def _kept_path(image_id: str) -> Path:
    """Where the answer for ``image_id`` from this version of the script is kept."""
    return kept_path("image facts", image_id, hashlib.sha256(source(SCRIPT)).hexdigest())


def _read_kept(path: Path, image: str) -> ImageFacts | None:
    """The kept answer at ``path`` through the same checks as a fresh one; None when there
    is none or it fails them (then the image is probed again)."""
    output = read_kept(path, _BOUNDS.max_bytes)
    if output is None:
        return None
    try:
        return _parse(output, image)
    except InfraError:
        return None


def module_names(sandboxes: SandboxFactory, spec: SandboxSpec, image_id: str) -> frozenset[str]:
    """The top-level module names the image of ``spec`` (ID ``image_id``) can import."""
    return image_facts(sandboxes, spec, image_id).modules


def _probe(sandboxes: SandboxFactory, spec: SandboxSpec) -> bytes:
    """The script's answer (JSON), run as root in a fresh sandbox of the image."""
    with sandboxes.open(spec) as sandbox:
        sandbox.put_archive(
            WORKSPACE, single_file_tar(SCRIPT, source(SCRIPT), uid=0, gid=0, mode=0o444)
        )
        result = run_whole(
            sandbox,
            ExecRequest(
                argv=["python3", "-I", f"{WORKSPACE}/{SCRIPT}"],
                user=ROOT_USER,
                workdir="/",
                env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"},
                timeout_s=60,
                output_cap=8 << 20,
                separate_stderr=True,
            ),
            f"the module listing of image {spec.image!r}",
        )
    if result.exit_code != 0 or result.output_truncated:
        tail = (result.stderr or result.output)[-300:].decode("utf-8", "replace")
        raise InfraError(
            f"listing the modules of image {spec.image!r} failed (exit {result.exit_code}): {tail}"
        )
    return result.output


def _parse(output: bytes, image: str) -> ImageFacts:
    """The facts in the script's answer, checked (``InfraError`` when they are not)."""
    try:
        answer = loads_bounded(output, _BOUNDS)
    except BoundsError as exc:
        raise InfraError(f"the module list of image {image!r} is unreadable ({exc})") from exc
    names = answer.get("modules") if isinstance(answer, dict) else None
    plugins = answer.get("pytest_plugins") if isinstance(answer, dict) else None
    if (
        not isinstance(names, list)
        or not isinstance(plugins, list)
        or not _strings(names + plugins)
    ):
        raise InfraError(f"the module list of image {image!r} is not two lists of names")
    bytecode = parse_bytecode(answer.get("bytecode"))
    install = parse_bytecode(answer.get("install_bytecode"))
    if bytecode is None or install is None:
        raise InfraError(f"the bytecode lists of image {image!r} are not lists of links")
    return ImageFacts(frozenset(names), tuple(plugins), bytecode, install)


def parse_bytecode(value: object) -> tuple[tuple[str, str], ...] | None:
    """The image's bytecode links, each a normalized relative path ending ``.pyc`` and an
    absolute ``.pyc`` in a ``__pycache__`` folder, neither in the workspace; None when
    the answer is anything else."""
    if not isinstance(value, list) or len(value) > MAX_LINKS:
        return None
    links = []
    for pair in value:
        if not (isinstance(pair, list) and len(pair) == 2 and _strings(pair)):
            return None
        link, target = pair
        if not (_clean(link) and _clean(target[1:]) and target.startswith("/")):
            return None
        if "/__pycache__/" not in target or link.startswith(WORKSPACE[1:] + "/"):
            return None
        if target.startswith(WORKSPACE + "/"):
            return None
        links.append((link, target))
    return tuple(links)


def _clean(path: str) -> bool:
    """A normalized relative path to a ``.pyc``, nothing a tar or a shell could misread."""
    return (
        path.endswith(".pyc")
        and posixpath.normpath(path) == path
        and not path.startswith(("/", "../"))
        and ".." not in path.split("/")
        and path.isprintable()
    )


def _strings(values: list[object]) -> bool:
    return all(isinstance(item, str) for item in values)
