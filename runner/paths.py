"""Paths deltarun reasons about: repository-relative paths inside a sandbox (pure), the
agent's uid the sandbox contract fixes (fixtures are built owned by it), and the paths a
suite names on this machine, held inside the suite (``inside``, ``writable``).

A suite is input (DESIGN rule 6): a task line, a controls file, a kit or an instances file
is downloaded and shared, and every path it names is a string someone else wrote. Each one
is resolved here, one component at a time, from the folder of the file that names it, and
refused (``SuitePathError``, exit 2, one line naming the file, the field and the path) when
it is absolute or when any step of it, through ``..`` or a symbolic link, leaves that
folder: no byte outside the suite is read on a suite's say-so. A link that stays inside is
followed. Paths given on the command line are the user's own choice and are not confined.

What deltarun writes into a suite (validation.json, its validation run, a resealed
tasks.jsonl or controls.yaml) goes through ``writable``: every folder on the way is a real
folder (no link) and the file itself is not a link, so a link a suite ships where deltarun
writes is refused rather than written through; the write itself is an atomic replace in
that real folder (``runner.atomic``).
"""

from __future__ import annotations

import os
import posixpath
import stat
from collections.abc import Iterable
from pathlib import Path, PurePath, PurePosixPath

from runner.errors import SuitePathError, UserError

# The uid (and gid) an agent runs as in every sandbox; its workspace files are owned by it.
AGENT_UID = 1000


def is_forbidden(rel: str, forbidden: Iterable[str]) -> bool:
    """True when ``rel`` is a forbidden path or lies under one (``.git/`` matches ``.git``)."""
    for entry in forbidden:
        base = entry.strip("/")
        if not base:
            continue
        if rel == base or rel.startswith(base + "/"):
            return True
    return False


def _real(path: Path) -> Path:
    """``path`` with every link resolved (the folder a check compares against)."""
    return Path(os.path.realpath(path))


def _within(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


def inside(
    base: Path,
    relative: str | PurePath,
    *,
    file: object,
    field: str,
    root: Path | None = None,
) -> Path:
    """The real path ``relative`` names from the folder ``base``, when every step of it
    stays inside ``root`` (default ``base``); ``SuitePathError`` otherwise.

    ``file`` and ``field`` name where the string came from (``tasks.jsonl:3`` and
    ``hidden``). Each component is resolved in turn, so a link that leads out and another
    that leads back in is refused too: the path never passes through a folder outside. A
    path that does not exist (yet) is returned as it would be; its reader says it is
    missing."""
    text = str(relative)
    shown = f"{file}: {field}: {text!r}"
    if not text or "\x00" in text:
        raise SuitePathError(f"{shown}: not a path; name a file inside the suite")
    real_root = _real(root if root is not None else base)
    if PurePosixPath(text).is_absolute():
        raise SuitePathError(
            f"{shown}: an absolute path; a suite names its files relative to the folder of "
            f"the file naming them ({real_root}), inside it"
        )
    current = _real(base)
    for part in PurePosixPath(text).parts:
        try:
            current = _real(current / part)
        except (OSError, RuntimeError) as exc:  # a loop of links, an over-long name
            raise SuitePathError(f"{shown}: cannot be followed ({exc})") from exc
        if not _within(current, real_root):
            how = "climbs out of" if part == ".." else "goes through a symbolic link out of"
            raise SuitePathError(
                f"{shown}: {how} {real_root}; a suite names only files inside the folder of "
                "the file naming them"
            )
    return current


def under(base: Path, relative: str, *, file: object, field: str) -> Path:
    """``base / relative`` for a string a suite names under a folder the user chose on the
    command line (``import swebench --repos DIR``): refused when absolute or when it climbs
    out with ``..`` (``SuitePathError``); links the user made in that folder are theirs."""
    shown = f"{file}: {field}: {relative!r}"
    pure = PurePosixPath(relative)
    if not relative or "\x00" in relative or pure.is_absolute():
        raise SuitePathError(f"{shown}: not a relative path; name a folder under {base}")
    if posixpath.normpath(relative).split("/")[0] == "..":
        raise SuitePathError(f"{shown}: climbs out of {base} with '..'; name a folder under it")
    return base / relative


CLOSED_FOLDER_ENTRIES = 1_000_000
"""The most files and folders a folder ``closed_folder`` walks may hold (a bare repository
keeps its objects packed: a few thousand entries)."""


def closed_folder(folder: Path, pointers: Iterable[str], *, file: object, field: str) -> None:
    """A folder a suite ships that a tool then reads whole (``git fetch`` of a bare
    repository): nothing in it may lead out of it. A symbolic link anywhere in it, or one of
    the ``pointers`` (files that name another folder the tool would read: git's
    ``objects/info/alternates``, ``commondir``, a ``.git`` file), is refused
    (``SuitePathError``). Links are not followed."""
    shown = f"{file}: {field}: {folder}"
    for relative in pointers:
        if os.path.lexists(folder / relative):
            raise SuitePathError(
                f"{shown}: holds {relative}, which names files outside it; bundle the "
                "repository instead (git bundle create FILE --all)"
            )
    seen = 0
    for parent, dirs, files in os.walk(folder, followlinks=False):
        seen += len(dirs) + len(files)
        if seen > CLOSED_FOLDER_ENTRIES:  # walked whole on every seal and run: bounded
            raise SuitePathError(
                f"{shown}: more than {CLOSED_FOLDER_ENTRIES} files and folders; bundle the "
                "repository instead (git bundle create FILE --all)"
            )
        for name in dirs + files:
            if os.path.islink(os.path.join(parent, name)):
                where = os.path.relpath(os.path.join(parent, name), folder)
                raise SuitePathError(
                    f"{shown}: {where} is a symbolic link; a folder a suite ships is read "
                    "whole, so it holds none: bundle the repository instead"
                )


def writable(base: Path, relative: str | PurePath, *, what: str) -> Path:
    """Where deltarun may write ``relative`` under the folder ``base``: every folder on the
    way that exists is a real folder (not a link) and the last component, if it exists, is
    not a link. ``what`` says what deltarun writes there, for the one-line refusal
    (``SuitePathError``). The folder ``base`` itself is the caller's (found from the
    command line, or already held inside by ``inside``), resolved here."""
    parts = PurePosixPath(str(relative)).parts
    if not parts or PurePosixPath(str(relative)).is_absolute() or ".." in parts:
        raise SuitePathError(f"{base}: {relative!r}: not a path inside it, where {what}")
    target = _real(base).joinpath(*parts)
    current = _real(base)
    for index, part in enumerate(parts):
        current = current / part
        try:
            mode = current.lstat().st_mode
        except FileNotFoundError:
            break  # nothing there yet: deltarun creates it, as a real file or folder
        if stat.S_ISLNK(mode):
            raise SuitePathError(
                f"{current}: a symbolic link (to {os.readlink(current)}) where {what}; deltarun "
                "never writes through a link in a suite: remove the link"
            )
        if index < len(parts) - 1 and not stat.S_ISDIR(mode):
            raise SuitePathError(f"{current}: not a folder, where {what}; remove it")
    return target


def own_folder(base: Path, relative: str, *, what: str) -> Path:
    """A real folder ``relative`` under ``base`` for deltarun's own files (created when
    missing): never a link, never a file (``SuitePathError``)."""
    path = writable(base, relative, what=what)
    if path.exists() and not path.is_dir():
        raise SuitePathError(f"{path}: not a folder, where {what}; remove it")
    path.mkdir(parents=True, exist_ok=True)
    return path


def new_folder(out: Path, *, option: str = "--out") -> None:
    """``out`` (a folder deltarun writes whole: an import's suite) is new or an empty real
    folder. A link there is refused (``SuitePathError``, exit 2), whatever it points at: the
    folder is made beside it and renamed into place, never written through a link a
    downloaded kit may ship where the user points ``option``; anything else there is a
    ``UserError``."""
    try:
        mode = out.lstat().st_mode
    except FileNotFoundError:
        return
    if stat.S_ISLNK(mode):
        raise SuitePathError(
            f"{option} {out}: a symbolic link (to {os.readlink(out)}); deltarun writes a new "
            f"folder there, never through a link: pass a new {option} directory"
        )
    if not stat.S_ISDIR(mode) or any(out.iterdir()):
        raise UserError(f"{out}: exists and is not empty; pass a new {option} directory")
