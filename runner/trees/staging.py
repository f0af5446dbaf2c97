"""Fixtures made ready for sandboxes once per machine, then reused by every trial.

Copying a fixture into a sandbox cost three things on every trial: building its tar
in Python (twice: the agent's sandbox and the verify sandbox), Docker writing the
files, and the baseline commit inside the sandbox, which hashes and compresses the
whole tree. For a 100 MB fixture the first and the last were most of the trial.
Now each is done once per (fixture, forbidden paths) and kept in the cache
(``runner.trees.cache``, under ``staged/``):

- ``workspace``: the tar the sandbox's ``/workspace`` receives (owned by the agent's
  uid, forbidden paths left out), streamed from disk to the engine;
- ``baseline``: the tar of ``/baseline/git``, the baseline commit of exactly that
  workspace, written by ``runner.trees.gitobjects`` (pack, pack index, an index whose
  stat data lets the harness's git skip reading untouched files). None when the
  fixture has a path git will not index: then the sandbox commits it itself, as before;
- ``tree`` and ``btree``: those two tars unpacked, for copy-free workspaces
  (``runner.sandbox.overlay``: a sandbox mounts a copy-on-write view of them instead of
  copying them in), made only where views work (a root worker on the engine's host);
- ``view``: the fixture's paths, footprint and pristine harness files
  (``runner.trees.facts``), all a trial needs of the fixture besides the two tars.

A trial whose entries are all cached never reads the fixture's members: each entry
takes a loader that is called only to make it. Entries are keyed by the fixture's
pinned digest (``fixture_key``), and the members they are made from were checked
against that pin by the inputs; a file is written under a temporary name and
renamed, so a reader never sees half of one.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import tarfile
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, TypeVar

from runner import telemetry
from runner.atomic import write_atomic
from runner.paths import AGENT_UID, is_forbidden
from runner.records import GitRepo, RepoTask
from runner.trees import gitobjects, harness_git
from runner.trees.archives import SANDBOX_MTIME, ArchiveCaps, Member, build_tar
from runner.trees.cache import CacheDir
from runner.trees.facts import FixtureView, size_in_tmpfs

BRANCH = "main"
Load = Callable[[], list[Member]]
_T = TypeVar("_T")


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
        self._footprints: dict[str, int] = {}

    def view(
        self, key: str, caps: ArchiveCaps, load: Load, declared: tuple[str, ...] = ()
    ) -> tuple[FixtureView, bool]:
        """The fixture's view (``runner.trees.facts``) and whether it came from the cache.
        Its entry is keyed by the archive caps too: members are read, and so checked
        against the caps, at least once under each caps a run uses; and by the declared
        tests, whose files it keeps."""
        tag = f"caps={caps.max_members},{caps.max_member_bytes},{caps.max_total_bytes}"
        entry = self._name("view", key, (tag, *declared), "json")
        target = self.cache.path(entry)
        if target.is_file():
            try:
                found = FixtureView.from_bytes(target.read_bytes())
            except OSError:
                found = None
            if found is not None:
                self._hit(entry)
                return found, True
        made = FixtureView.of(load(), declared)
        self._store(entry, lambda out: out.write(made.to_bytes()))
        return made, False

    def workspace(self, key: str, load: Load, exclude: tuple[str, ...]) -> Path:
        """The tar of ``/workspace``: the fixture as the agent's uid, ``exclude`` left out.
        ``load`` gives the fixture's members; it is called only to make the entry."""
        entry = self._name("workspace", key, exclude, "tar")
        if self.cache.path(entry).is_file():
            return self._hit(entry)

        def write(out: BinaryIO) -> None:
            out.write(_workspace_tar(load(), exclude))

        return self._store(entry, write)

    def tree(self, key: str, load: Load, exclude: tuple[str, ...]) -> tuple[Path, int]:
        """The workspace tar unpacked once on this host, for copy-free workspaces
        (``runner.sandbox.overlay``): the same files, owners and modes a copy gives, and its
        footprint in a tmpfs. Only a root worker makes it (it sets the agent's uid)."""
        made = self._unpacked("tree", key, exclude, lambda: self.workspace(key, load, exclude))
        assert made is not None  # a workspace tar always exists
        return made

    def baseline_tree(
        self, key: str, load: Load, exclude: tuple[str, ...]
    ) -> tuple[Path, int] | None:
        """The ``/baseline`` tar unpacked once on this host, as ``tree``; None when there is
        no staged baseline (the sandbox commits it)."""
        return self._unpacked("btree", key, exclude, lambda: self.baseline(key, load, exclude))

    def _unpacked(
        self, kind: str, key: str, exclude: tuple[str, ...], tar_of: Callable[[], Path | None]
    ) -> tuple[Path, int] | None:
        entry = self._name(kind, key, exclude, "d")
        target = self.cache.path(entry)
        if not target.is_dir():
            tar = tar_of()
            if tar is None:
                return None
            with self._lock:
                self.misses += 1
            telemetry.cache_lookup("staged", hit=False)
            target.parent.mkdir(parents=True, exist_ok=True)
            part = Path(tempfile.mkdtemp(prefix=".part-", dir=target.parent))
            try:
                with tarfile.open(tar) as archive:  # a tar deltarun built, owners and all
                    if hasattr(tarfile, "tar_filter"):  # Python 3.11.4 and later
                        archive.extractall(part, numeric_owner=True, filter="tar")
                    else:
                        archive.extractall(part, numeric_owner=True)
                # Root's alone: the files are the agent's uid, which on the host may be a
                # person's; the overlay reads the tree with its mounter's (root's) rights.
                os.chmod(part, 0o700)
                try:
                    part.rename(target)  # another process may have made it first: theirs stays
                except OSError:
                    if not target.is_dir():
                        raise
            finally:
                shutil.rmtree(part, ignore_errors=True)
            self.cache.touch(entry)
            self.cache.evict(keep=entry)
        else:
            self._hit(entry)
        with self._lock:
            size = self._footprints.get(entry)
        if size is None:
            size = tree_footprint(target)
            with self._lock:
                self._footprints[entry] = size
        return target, size

    def baseline(self, key: str, load: Load, exclude: tuple[str, ...]) -> Path | None:
        """The tar of ``/baseline`` for that workspace, or None when git would refuse a path
        (then the fixture is read each time: that case is rare and commits in the sandbox)."""
        entry = self._name("baseline", key, exclude, "tar")
        if self.cache.path(entry).is_file():
            return self._hit(entry)
        files = [
            gitobjects.FileEntry(m.path.encode("utf-8", "surrogateescape"), m.data, m.executable)
            for m in load()
            if not m.is_dir and not is_forbidden(m.path, exclude)
        ]
        if any(gitobjects.refused_path(f.path) for f in files):
            return None
        return self._store(entry, lambda out: _baseline_tar(files, out))

    @staticmethod
    def _name(kind: str, key: str, qualifiers: tuple[str, ...], suffix: str) -> str:
        # The files' mtime names the entries too: a cache made before it was fixed (mtime
        # 0) is not reused.
        parts = [kind, key, *qualifiers, f"mtime={SANDBOX_MTIME}"]
        name = hashlib.sha256("\0".join(parts).encode()).hexdigest()
        return f"staged/{name[:40]}.{kind}.{suffix}"

    def _hit(self, entry: str) -> Path:
        with self._lock:
            self.hits += 1
        telemetry.cache_lookup("staged", hit=True)
        self.cache.touch(entry)
        return self.cache.path(entry)

    def _store(self, entry: str, write: Callable[[BinaryIO], object]) -> Path:
        """Write a cache entry under a temporary name, then rename it into place."""
        with self._lock:
            self.misses += 1
        telemetry.cache_lookup("staged", hit=False)
        target = self.cache.path(entry)
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target, write)
        self.cache.touch(entry)
        self.cache.evict(keep=entry)
        return target


class StagedFixture:
    """One task's fixture for one trial. Its tars and view come from the cache when they
    are there; its members are read (once) only to make what is missing, or for every
    need when staging is off (``staging`` None) or the cache cannot be written."""

    def __init__(
        self,
        key: str | None,
        load: Load,
        staging: Staging | None,
        caps: ArchiveCaps,
        declared: tuple[str, ...] = (),
    ) -> None:
        self._key = key
        self._declared = declared
        self._load = load
        self._staging = staging if key is not None else None
        self._caps = caps
        self._members: list[Member] | None = None
        self._view: FixtureView | None = None

    def members(self) -> list[Member]:
        if self._members is None:
            self._members = self._load()
        return self._members

    @property
    def view(self) -> FixtureView:
        if self._view is None:
            self._view = self._staged(
                lambda s, k: s.view(k, self._caps, self.members, self._declared)[0]
            ) or FixtureView.of(self.members(), self._declared)
        return self._view

    def workspace_tar(self, exclude: tuple[str, ...]) -> Path | bytes | None:
        """The tar of ``/workspace`` (agent's uid, ``exclude`` left out): the staged file,
        else built now; None when there is no fixture."""
        staged = self._staged(lambda s, k: s.workspace(k, self.members, exclude))
        if staged is not None:
            return staged
        members = self.members()
        if not members:
            return None
        return _workspace_tar(members, exclude)

    def workspace_tree(self, exclude: tuple[str, ...]) -> tuple[Path, int] | None:
        """The staged tree of ``/workspace`` and its footprint (``Staging.tree``); None when
        staging is off or the tree cannot be made here (then the sandbox copies the tar)."""
        return self._staged(lambda s, k: s.tree(k, self.members, exclude))

    def baseline_tree(self, exclude: tuple[str, ...]) -> tuple[Path, int] | None:
        """The staged ``/baseline`` unpacked (``Staging.baseline_tree``), or None."""
        return self._staged(lambda s, k: s.baseline_tree(k, self.members, exclude))

    def baseline_tar(self, exclude: tuple[str, ...]) -> Path | None:
        """The staged ``/baseline`` for that workspace; None: the sandbox commits it."""
        return self._staged(lambda s, k: s.baseline(k, self.members, exclude))

    def _staged(self, make: Callable[[Staging, str], _T | None]) -> _T | None:
        if self._staging is None or self._key is None:
            return None
        try:
            return make(self._staging, self._key)
        except OSError:
            return None  # a cache that cannot be written: staging is an optimisation


def _workspace_tar(members: list[Member], exclude: tuple[str, ...]) -> bytes:
    """The tar of ``/workspace``: the agent's uid, ``exclude`` left out, every entry's
    mtime ``SANDBOX_MTIME`` (a packaging tool refuses files dated before 1980)."""
    return build_tar(members, uid=AGENT_UID, gid=AGENT_UID, exclude=exclude, mtime=SANDBOX_MTIME)


def _baseline_tar(files: list[gitobjects.FileEntry], out: BinaryIO) -> None:
    """``git/`` for ``/baseline``: what ``git init``, ``git add -A`` and ``git commit`` leave,
    root-owned, the index's stat data as the workspace tar gives the files
    (``SANDBOX_MTIME``)."""
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
            "git/index": gitobjects.index_file(
                files, snap.oids, uid=AGENT_UID, mtime=SANDBOX_MTIME
            ),
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


def tree_footprint(root: Path) -> int:
    """Bytes a tree takes in a tmpfs, counted as ``runner.trees.facts.footprint`` counts."""
    total = 0
    for dirpath, dirs, files in os.walk(root):
        total += size_in_tmpfs(0) * len(dirs)
        total += sum(size_in_tmpfs(os.lstat(os.path.join(dirpath, f)).st_size) for f in files)
    return total
