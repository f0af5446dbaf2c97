"""Fixtures made ready for sandboxes once per machine, then reused by every trial.

Copying a fixture into a sandbox cost three things on every trial: building its tar
in Python (twice: the agent's sandbox and the verify sandbox), Docker writing the
files, and the baseline commit inside the sandbox, which hashes and compresses the
whole tree. For a 100 MB fixture the first and the last were most of the trial.
Now each is done once per (fixture, forbidden paths) and kept in the cache
(``runner.cache``, under ``staged/``):

- ``workspace``: the tar the sandbox's ``/workspace`` receives (owned by the agent's
  uid, forbidden paths left out), streamed from disk to the engine;
- ``baseline``: the tar of ``/baseline/git``, the baseline commit of exactly that
  workspace, written by ``runner.gitobjects`` (pack, pack index, an index whose
  stat data lets the harness's git skip reading untouched files). None when the
  fixture has a path git will not index: then the sandbox commits it itself, as before.

Entries are keyed by the fixture's pinned digest (``fixture_key``), and the members
they are made from were checked against that pin by the inputs; a file is written
under a temporary name and renamed, so a reader never sees half of one.
"""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from runner import gitobjects, harness_git
from runner.archives import Member, build_tar
from runner.cache import CacheDir
from runner.models import GitRepo, RepoTask
from runner.paths import is_forbidden
from runner.sandbox.base import AGENT_UID

BRANCH = "main"


def fixture_key(task: RepoTask) -> str:
    """The identity of a task's fixture content: its tree id or its archive's SHA-256."""
    if isinstance(task.repo, GitRepo):
        return f"tree:{task.repo_tree}"
    return f"tar:{task.repo_sha256}"


class Staging:
    """Workspace tars and baseline git directories of fixtures, in the cache."""

    def __init__(self, cache: CacheDir) -> None:
        self.cache = cache
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()

    def workspace(self, key: str, fixture: list[Member], exclude: tuple[str, ...]) -> Path:
        """The tar of ``/workspace``: the fixture as the agent's uid, ``exclude`` left out."""

        def write(out: io.BufferedWriter) -> None:
            out.write(build_tar(fixture, uid=AGENT_UID, gid=AGENT_UID, exclude=exclude))

        return self._entry("workspace", key, exclude, write)

    def baseline(self, key: str, fixture: list[Member], exclude: tuple[str, ...]) -> Path | None:
        """The tar of ``/baseline`` for that workspace, or None when git would refuse a path."""
        files = [
            gitobjects.FileEntry(m.path.encode("utf-8", "surrogateescape"), m.data, m.executable)
            for m in fixture
            if not m.is_dir and not is_forbidden(m.path, exclude)
        ]
        if any(gitobjects.refused_path(f.path) for f in files):
            return None
        return self._entry("baseline", key, exclude, lambda out: _baseline_tar(files, out))

    def _entry(
        self,
        kind: str,
        key: str,
        exclude: tuple[str, ...],
        write: Callable[[io.BufferedWriter], None],
    ) -> Path:
        name = hashlib.sha256("\0".join([kind, key, *exclude]).encode()).hexdigest()
        entry = f"staged/{name[:40]}.{kind}.tar"
        target = self.cache.path(entry)
        if target.is_file():
            with self._lock:
                self.hits += 1
            self.cache.touch(entry)
            return target
        with self._lock:
            self.misses += 1
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".part-")
        try:
            with os.fdopen(fd, "wb") as out:
                write(out)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self.cache.touch(entry)
        self.cache.evict(keep=entry)
        return target


def _baseline_tar(files: list[gitobjects.FileEntry], out: io.BufferedWriter) -> None:
    """``git/`` for ``/baseline``: what ``git init``, ``git add -A`` and ``git commit`` leave,
    root-owned, the index's stat data as the workspace tar gives the files (mtime 0)."""
    snap = gitobjects.snapshot(files)
    commit = gitobjects.commit_of(snap.tree)
    objects = [*snap.objects, commit]
    with tempfile.TemporaryFile() as packed:
        writer = gitobjects.PackWriter(len(objects))
        packed.write(writer.header)
        for obj in objects:
            packed.write(writer.add(obj))
        packed.write(writer.finish())
        pack_size = packed.tell()
        packed.seek(0)
        name = f"git/objects/pack/pack-{writer.checksum.hex()}"
        small = {
            "git/HEAD": f"ref: refs/heads/{BRANCH}\n".encode(),
            "git/config": b"[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n"
            b"\tbare = false\n",
            "git/info/attributes": harness_git.NEUTRAL_ATTRIBUTES.encode(),
            f"git/refs/heads/{BRANCH}": commit.oid.hex().encode() + b"\n",
            "git/index": gitobjects.index_file(files, snap.oids, uid=AGENT_UID, mtime=0),
            f"{name}.idx": writer.index(),
        }
        with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as archive:
            for directory in (
                "git",
                "git/info",
                "git/refs",
                "git/refs/heads",
                "git/refs/tags",
                "git/objects",
                "git/objects/info",
                "git/objects/pack",
            ):
                info = tarfile.TarInfo(directory)
                info.type, info.mode = tarfile.DIRTYPE, 0o700
                archive.addfile(info)
            for path, data in small.items():
                info = tarfile.TarInfo(path)
                info.size, info.mode = len(data), 0o600
                archive.addfile(info, io.BytesIO(data))
            info = tarfile.TarInfo(f"{name}.pack")
            info.size, info.mode = pack_size, 0o444
            archive.addfile(info, packed)
