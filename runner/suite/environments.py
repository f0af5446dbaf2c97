"""Environment images built from the suite: ``environments/<name>/`` becomes a pinned image.

A suite may carry ``environments/<name>/Dockerfile`` with its build context, next to
``tasks.jsonl``; a repository task names ``environment: <name>``. ``deltarun build``:

    context digest   SHA-256 over every relative path, executable bit and file's bytes
                     (the digest of an agent directory, ``archives.tree_digest``)
    reuse or build   the local tag ``deltarun-env/<name>:<digest[:16]>`` is reused when its
                     label ``deltarun.context`` is the digest and it sits on the current base;
                     otherwise the context, exactly as digested, is built with
                     ``--build-arg BASE=<base image ID>`` (a Dockerfile starts ``ARG BASE`` /
                     ``FROM ${BASE}``)
    contract         the image's layers start with the base's, and the sandbox preflight
                     passes (sh, timeout, git, python3, uid 1000, no setuid files); only
                     then is it tagged, so a tag never names an image that broke it
    pins             ``environment_sha256`` and ``environment_image`` in every task line
                     naming it (other lines byte for byte), then ``seal`` as the CLI does

``check_contexts`` runs in ``seal`` and ``load_suite``: an environment that is missing,
unbuilt (``UserError``) or whose context changed since it was pinned (``DigestMismatch``,
exit 3) stops before any sandbox starts.

The pure parts (digest, pins, which environments a suite names) are here; building and
writing the pins is ``runner.suite.build``, which reaches the Docker engine through the
``ImageBuilder`` protocol (``runner.sandbox.images``).
"""

from __future__ import annotations

import json
import os
import stat
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from runner.errors import DigestMismatch, UserError
from runner.hashing import sha256_file, sha256_json
from runner.paths import inside
from runner.records import RepoTask, Task
from runner.suite.lines import parse_json_line, task_lines

if TYPE_CHECKING:
    pass

ENVIRONMENTS_DIR = "environments"
CONTEXT_LABEL = "deltarun.context"
ENVIRONMENT_LABEL = "deltarun.environment"
BASE_LABEL = "deltarun.base"
NETWORKS = ("default", "none")
FIX_FROM = "start the Dockerfile with `ARG BASE` and `FROM ${BASE}`"


# --- the build context and its digest (pure, reads files only) ---------------------------


@dataclass(frozen=True)
class ContextEntry:
    """One entry of a build context: a directory (``source`` None) or a regular file."""

    path: str
    source: Path | None
    executable: bool = False


def context_dir(tasks_path: Path, name: str, where: str) -> Path:
    """Where the build context of environment ``name`` lives: beside tasks.jsonl, and inside
    the suite (``environments/`` or its folder a link that leads out is refused, naming
    ``where``, the task line)."""
    relative = f"{ENVIRONMENTS_DIR}/{name}"
    return inside(tasks_path.resolve().parent, relative, file=where, field="environment")


CONTEXT_MAX_ENTRIES = 100_000
"""The most files and folders an environment's build context may hold."""

CONTEXT_MAX_BYTES = 8 << 30
"""The most bytes its files may hold in all (digested, then sent to the engine)."""


def context_entries(root: Path) -> list[ContextEntry]:
    """Every directory and regular file under ``root``, sorted by path; a symbolic link or a
    special file (fifo, socket, device) is refused in one line: the digest could not pin it.
    So is a context over ``CONTEXT_MAX_ENTRIES`` entries or ``CONTEXT_MAX_BYTES`` bytes, as
    soon as the walk (one directory entry at a time) finds it."""
    if root.is_symlink():
        raise UserError(f"{root}: an environment folder must not be a symbolic link")
    entries: list[ContextEntry] = []
    total = 0
    pending = [root]
    while pending:
        folder = pending.pop()
        try:
            with os.scandir(folder) as listing:
                for item in listing:
                    full = Path(item.path)
                    mode = item.stat(follow_symlinks=False).st_mode
                    rel = full.relative_to(root).as_posix()
                    if stat.S_ISDIR(mode):
                        entries.append(ContextEntry(rel, None))
                        pending.append(full)
                    elif stat.S_ISREG(mode):
                        entries.append(ContextEntry(rel, full, bool(mode & 0o111)))
                        total += item.stat(follow_symlinks=False).st_size
                    else:
                        kind = "a symbolic link" if stat.S_ISLNK(mode) else "a special file"
                        raise UserError(
                            f"{full}: {kind} in the build context of an environment; only "
                            "regular files and folders are digested and built: copy its "
                            "target in instead"
                        )
                    if len(entries) > CONTEXT_MAX_ENTRIES or total > CONTEXT_MAX_BYTES:
                        raise UserError(
                            f"{root}: an environment's build context over the caps of "
                            f"{CONTEXT_MAX_ENTRIES} entries and {CONTEXT_MAX_BYTES} bytes"
                        )
        except OSError as exc:
            _unreadable(exc)
    return sorted(entries, key=lambda entry: entry.path)


def _unreadable(exc: OSError) -> None:
    raise UserError(f"{exc.filename}: cannot read this part of an environment's context ({exc})")


def context_digest(entries: Sequence[ContextEntry]) -> str:
    """SHA-256 of a context: the same rows as ``archives.tree_digest`` of its members
    (``[path, "dir", ""]`` or ``[path, "x" | "-", sha256]``), files read in chunks."""
    rows = []
    for entry in sorted(entries, key=lambda e: e.path):
        if entry.source is None:
            rows.append([entry.path, "dir", ""])
        else:
            rows.append([entry.path, "x" if entry.executable else "-", sha256_file(entry.source)])
    return sha256_json(rows)


def write_context_tar(entries: Sequence[ContextEntry], handle: IO[bytes]) -> None:
    """The context as the engine receives it: exactly the digested entries, owner 0:0,
    mode 0755/0644 by the executable bit, mtime 0 (the build cache sees content only)."""
    with tarfile.open(fileobj=handle, mode="w", format=tarfile.GNU_FORMAT) as archive:
        for entry in entries:
            info = tarfile.TarInfo(entry.path)
            info.mtime = 0
            if entry.source is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                archive.addfile(info)
                continue
            info.mode = 0o755 if entry.executable else 0o644
            with entry.source.open("rb") as data:
                info.size = os.fstat(data.fileno()).st_size
                archive.addfile(info, data)


# --- which environments a suite names, and the check of seal and load_suite --------------


def environments_of(tasks: Sequence[Task]) -> dict[str, list[RepoTask]]:
    """The environments the tasks name, in order of first use, each with its tasks."""
    named: dict[str, list[RepoTask]] = {}
    for task in tasks:
        if isinstance(task, RepoTask) and task.environment is not None:
            named.setdefault(task.environment, []).append(task)
    return named


def task_line_numbers(tasks_path: Path) -> list[int]:
    """The line number of each task, in file order (``read_tasks`` skips blank lines)."""
    return [line.number for line in task_lines(tasks_path)]


def check_contexts(tasks_path: Path, tasks: Sequence[Task]) -> None:
    """Every environment a task names exists, was built, and its context is the one pinned.

    Raises ``UserError`` (missing folder or Dockerfile, not built) or ``DigestMismatch``
    (the context changed since ``deltarun build`` pinned it), naming ``tasks.jsonl:LINE``.
    """
    if not environments_of(tasks):
        return
    numbers = task_line_numbers(tasks_path)
    digests: dict[str, str] = {}
    for task, number in zip(tasks, numbers, strict=True):
        if not isinstance(task, RepoTask) or task.environment is None:
            continue
        name, where = task.environment, f"{tasks_path}:{number}: task {task.id!r}"
        root = context_dir(tasks_path, name, f"{tasks_path}:{number}")
        if name not in digests:
            require_dockerfile(root, f"{where}: environment {name!r}")
        if not task.environment_sha256 or not task.environment_image:
            raise UserError(
                f"{where}: environment {name!r} is not built; run `deltarun build` on the suite "
                "(or its controls.yaml): it builds the image and pins it in this line"
            )
        if name not in digests:
            digests[name] = context_digest(context_entries(root))
        if digests[name] != task.environment_sha256:
            raise DigestMismatch(
                f"{root}: build context of environment {name!r} changed: {where} pins "
                f"{task.environment_sha256}, the folder has {digests[name]}; run "
                "`deltarun build` to rebuild and re-pin it, or restore the folder"
            )


def require_dockerfile(root: Path, where: str) -> None:
    """The environment's folder and its Dockerfile exist (one line naming the fix)."""
    if not root.is_dir() or not (root / "Dockerfile").is_file():
        missing = root / "Dockerfile" if root.is_dir() else root
        raise UserError(
            f"{where}: {missing} not found; add {ENVIRONMENTS_DIR}/<name>/Dockerfile next to "
            "tasks.jsonl, or fix the task's 'environment'"
        )


# --- writing the pins (pure rewrite of the lines, then one atomic replace) ----------------


@dataclass(frozen=True)
class Pin:
    """What ``deltarun build`` pins for one environment."""

    context_sha256: str
    image_id: str


def pin_lines(lines: Sequence[str], pins: Mapping[str, Pin]) -> list[str]:
    """Task lines with each environment task's pins set; a line already right is kept as it
    is, a line that changes is rewritten as canonical JSON (as ``seal`` does)."""
    result = []
    for line in lines:
        data = parse_json_line(line, "tasks.jsonl")
        name = data.get("environment") if isinstance(data, dict) else None
        pin = pins.get(name) if isinstance(name, str) else None
        if pin is not None and (
            data.get("environment_sha256") != pin.context_sha256
            or data.get("environment_image") != pin.image_id
        ):
            data["environment_sha256"] = pin.context_sha256
            data["environment_image"] = pin.image_id
            line = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        result.append(line)
    return result
