"""Git-tree fixtures: a task's repository named as one commit of a git bundle or bare repository.

Each source is fetched once into a private bare repository of the cache
(``GitStore``), keyed by the bundle's SHA-256 (or, for a bare repository
directory, by its path, re-fetched once per process). A trial's workspace is
exactly the commit's tree, written by ``git archive`` into a cached tar and then
read with the same member rules as a tar fixture: no ``.git`` of the source (the
agent must not read the project's future history), no symbolic links, no
devices, caps on count and size. The store's own ``info/attributes`` switches off
``export-ignore`` and ``export-subst``, so the tar holds the tree byte for byte
whatever the repository's ``.gitattributes`` say.

Git runs with no system or global configuration and never on a user's
repository for anything but reading its objects into the store.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from runner.bounded_input import excerpt
from runner.errors import ArchiveError, InfraError, UserError
from runner.hashing import sha256_file
from runner.trees.archives import ArchiveCaps, normalise_member_name
from runner.trees.cache import CacheDir

_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_ASKPASS": "true",
    "LC_ALL": "C",
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
}
_SETTINGS = ("-c", "core.hooksPath=/dev/null", "-c", "safe.directory=*", "-c", "gc.auto=0")
_ATTRIBUTES = "* -export-ignore -export-subst\n"
_FETCH_REFS = "+refs/*:refs/src/*"
_SYMLINK, _GITLINK = "120000", "160000"


class GitError(UserError):
    """A git source that cannot be read: one line naming the source and git's message."""


@dataclass(frozen=True)
class TreeEntry:
    """One blob of a tree, as ``git ls-tree -r -l`` lists it."""

    mode: str
    object_id: str
    size: int
    path: str


def git(args: Sequence[str], git_dir: Path | None = None, timeout_s: float = 600.0) -> bytes:
    """Run git with the harness's settings; stdout, or ``InfraError`` with git's message."""
    argv = ["git", *_SETTINGS]
    if git_dir is not None:
        argv += ["--git-dir", str(git_dir)]
    try:
        result = subprocess.run(
            [*argv, *args], env=_ENV, capture_output=True, timeout=timeout_s, check=False
        )
    except FileNotFoundError as exc:
        raise UserError("git is not installed; install it (Debian: apt-get install git)") from exc
    except subprocess.TimeoutExpired as exc:
        raise InfraError(f"git {args[0]} took longer than {timeout_s:.0f}s") from exc
    if result.returncode != 0:
        message = result.stderr.decode("utf-8", "replace").strip().splitlines()
        raise InfraError(f"git {args[0]}: {message[-1] if message else 'failed'}")
    return result.stdout


MAX_ENTRY_BYTES = 4096 + 128
"""The longest line of ``git ls-tree -r -l -z`` counted on: a path of PATH_MAX bytes, its
mode, type, object id and size."""


def listing(args: Sequence[str], git_dir: Path, max_entries: int, what: str) -> bytes:
    """The NUL-separated output of a git listing, read as it streams and cut off (git
    killed) past ``max_entries`` records or ``max_entries * MAX_ENTRY_BYTES`` bytes.

    A tree may hold the same subtree many times over: a bundle of a few kilobytes can list
    billions of paths, which ``git`` alone would write until its timeout."""
    cap = max_entries * MAX_ENTRY_BYTES
    argv = ["git", *_SETTINGS, "--git-dir", str(git_dir), *args]
    chunks: list[bytes] = []
    size = records = 0
    with (
        tempfile.TemporaryFile() as errors,
        subprocess.Popen(argv, env=_ENV, stdout=subprocess.PIPE, stderr=errors) as process,
    ):
        assert process.stdout is not None
        deadline = time.monotonic() + 600.0
        while chunk := os.read(process.stdout.fileno(), 1 << 16):
            size += len(chunk)
            records += chunk.count(b"\0")
            if records > max_entries or size > cap:
                process.kill()
                raise ArchiveError(
                    f"{what}: more than {max_entries} files, over the cap of {max_entries}; "
                    "raise runtime.archive.max_members in controls"
                )
            if time.monotonic() > deadline:
                process.kill()
                raise InfraError(f"git {args[0]} took longer than 600s")
            chunks.append(chunk)
        code = process.wait()
        if code != 0:
            errors.seek(0)
            message = errors.read(1 << 16).decode("utf-8", "replace").strip().splitlines()
            raise InfraError(f"git {args[0]}: {message[-1] if message else 'failed'}")
    return b"".join(chunks)


def is_bundle(path: Path) -> bool:
    """A git bundle file (v2 or v3 signature), as opposed to a bare repository directory."""
    if not path.is_file():
        return False
    with path.open("rb") as handle:
        return handle.read(16).startswith((b"# v2 git bundle", b"# v3 git bundle"))


def blob_id(data: bytes, object_format: int) -> str:
    """The git object id of a blob with ``data`` (SHA-1 ids are 40 hex digits, SHA-256 64)."""
    header = f"blob {len(data)}\0".encode()
    digest = hashlib.sha1 if object_format == 40 else hashlib.sha256
    return digest(header + data).hexdigest()


class GitStore:
    """Private bare repositories fetched from bundles and bare repositories, and tree tars."""

    def __init__(self, cache: CacheDir) -> None:
        self.cache = cache
        self._lock = threading.Lock()
        self._fetched_dirs: set[Path] = set()
        self.hits = 0  # trees and repositories found in the cache (for the benchmark)
        self.misses = 0

    def repository(self, source: Path, digest: str = "") -> Path:
        """The store's bare repository holding ``source``'s objects (bundle or bare repo)."""
        source = source.resolve()
        if is_bundle(source):
            key = f"git/{digest or sha256_file(source)}"
        elif (source / "objects").is_dir() or (source / ".git" / "objects").is_dir():
            key = f"git/dir-{hashlib.sha256(str(source).encode()).hexdigest()}"
        elif not source.exists():
            raise GitError(f"{source}: git source not found; fix repo.git in tasks.jsonl")
        else:
            raise GitError(
                f"{source}: neither a git bundle nor a bare repository; give a file made by "
                "`git bundle create` or a directory made by `git clone --bare`"
            )
        with self._lock:
            target = self.cache.path(key)
            fresh = not key.startswith("git/dir-") or source in self._fetched_dirs
            if target.is_dir() and fresh:
                self.cache.touch(key)
                return target
            self._fetch(source, target)
            self._fetched_dirs.add(source)
            self.cache.touch(key)
        self.cache.evict(keep=key)
        return target

    def _fetch(self, source: Path, target: Path) -> None:
        """Read ``source``'s objects into ``target`` (created atomically when new)."""
        if target.is_dir():
            _fetch_into(source, target)
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".part-"))
        try:
            git(["init", "-q", "--bare", str(tmp)])
            (tmp / "info").mkdir(exist_ok=True)
            (tmp / "info" / "attributes").write_text(_ATTRIBUTES)
            _fetch_into(source, tmp)
            try:
                os.replace(tmp, target)
            except OSError:
                if not target.is_dir():
                    raise
                # Another process (a pool sibling) stored the same repository first.
                shutil.rmtree(tmp, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def tree_of(self, repo: Path, commit: str, source: str) -> str:
        """The tree id of ``commit``; ``GitError`` naming ``source`` when it lacks the commit."""
        try:
            kind = git(["cat-file", "-t", commit], repo).strip()
        except InfraError as exc:
            raise GitError(
                f"{source}: does not contain commit {commit}; bundle the branch that holds it "
                "(git bundle create FILE --all) or fix repo.commit"
            ) from exc
        if kind != b"commit":
            raise GitError(f"{source}: {commit} is a {kind.decode()}, not a commit")
        return git(["rev-parse", f"{commit}^{{tree}}"], repo).decode().strip()

    def entries(self, repo: Path, tree: str, max_entries: int | None = None) -> list[TreeEntry]:
        """Every blob (and link) of ``tree``, recursively; with ``max_entries``, an
        ``ArchiveError`` as soon as git lists more (``listing``)."""
        args = ["ls-tree", "-r", "-l", "-z", "--full-tree", tree]
        if max_entries is None:
            out = git(args, repo)
        else:
            out = listing(args, repo, max_entries, f"tree {tree[:12]}")
        entries: list[TreeEntry] = []
        for record in out.split(b"\0"):
            if not record:
                continue
            meta, _, path = record.partition(b"\t")
            mode, _kind, object_id, size = meta.decode().split()
            entries.append(
                TreeEntry(
                    mode,
                    object_id,
                    0 if size == "-" else int(size),
                    path.decode("utf-8", "surrogateescape"),
                )
            )
        return entries

    def tree_tar(self, repo: Path, tree: str) -> Path:
        """A cached tar of ``tree`` at its root (``git archive``), written atomically."""
        key = f"trees/{tree}.tar"
        target = self.cache.path(key)
        with self._lock:
            if target.is_file():
                self.hits += 1
                self.cache.touch(key)
                return target
            self.misses += 1
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".part-")
            os.close(fd)
            try:
                git(["archive", "--format=tar", "-o", tmp, tree], repo)
                os.replace(tmp, target)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
            self.cache.touch(key)
        self.cache.evict(keep=key)
        return target

    def bundle_of(self, repo: Path, commits: Sequence[str], out: Path) -> None:
        """Write a bundle holding ``commits`` and their history (for a bare repository)."""
        refs = [f"refs/deltarun/{commit}" for commit in commits]
        for ref, commit in zip(refs, commits, strict=True):
            git(["update-ref", ref, commit], repo)
        git(["bundle", "create", "-q", str(out), *refs], repo)

    def repository_from_blob(self, digest: str, blob: Callable[[], Path]) -> Path:
        """The repository of the bundle blob ``digest``, unbundled from ``blob()`` on first use."""
        key = f"git/{digest}"
        target = self.cache.path(key)
        with self._lock:
            if target.is_dir():
                self.cache.touch(key)
                return target
            self._fetch(blob(), target)
            self.cache.touch(key)
        self.cache.evict(keep=key)
        return target


def _fetch_into(source: Path, repo: Path) -> None:
    """A bundle is unbundled (every object it holds, whatever its refs are called); a bare
    repository's refs are fetched."""
    try:
        if is_bundle(source):
            git(["bundle", "unbundle", str(source)], repo)
        else:
            git(
                ["fetch", "-q", "--no-tags", "--no-write-fetch-head", str(source), _FETCH_REFS],
                repo,
            )
    except InfraError as exc:
        raise GitError(f"{source}: cannot read it as a git repository or bundle ({exc})") from exc


def check_entries(entries: Sequence[TreeEntry], caps: ArchiveCaps, source: str) -> None:
    """The tar members' rules, applied to a tree: relative paths, no links, caps."""
    total = 0
    if len(entries) > caps.max_members:
        raise ArchiveError(
            f"{source}: {len(entries)} files, over the cap of {caps.max_members}; raise "
            "runtime.archive.max_members in controls"
        )
    for entry in entries:
        try:
            normalise_member_name(entry.path)
        except ValueError as exc:
            raise ArchiveError(f"{source}: entry {excerpt(entry.path)}: {exc}") from exc
        if entry.mode == _SYMLINK:
            raise ArchiveError(
                f"{source}: entry {excerpt(entry.path)} is a symbolic link; only regular files and "
                "directories are allowed"
            )
        if entry.mode == _GITLINK:
            raise ArchiveError(
                f"{source}: entry {excerpt(entry.path)} is a submodule; vendor its files into "
                "the tree"
            )
        if entry.size > caps.max_member_bytes:
            raise ArchiveError(
                f"{source}: entry {excerpt(entry.path)} is {entry.size} bytes, over the cap of "
                f"{caps.max_member_bytes} (runtime.archive.max_member_bytes)"
            )
        total += entry.size
    if total > caps.max_total_bytes:
        raise ArchiveError(
            f"{source}: {total} bytes in total, over the cap of {caps.max_total_bytes} "
            "(runtime.archive.max_total_bytes)"
        )
