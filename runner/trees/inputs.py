"""Task archives and git trees of the local suite directory, digest-checked, in bounded memory.

Each archive is re-hashed against its pin when read, so a file changed after
``run`` started its checks is caught before it reaches a sandbox; a git fixture
is the pinned tree, written from the cache's repository (``runner.trees.gitfixture``).
Members stay in memory only within a small budget (``MemberCache``): a large
fixture is read from disk again for each trial, so memory does not grow with the
number or size of fixtures. Remote workers use a content-addressed cache instead.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from runner.errors import DigestMismatch
from runner.hashing import sha256_file
from runner.records import GitRepo, RepoTask
from runner.trees.archives import DEFAULT_CAPS, ArchiveCaps, Member, read_members
from runner.trees.cache import CacheDir
from runner.trees.gitfixture import GitStore

# Archives whose members take more than this are never kept between trials.
MEMORY_BUDGET = 64 << 20


class MemberCache:
    """Members of recently read archives, least recently used first out, within a byte budget."""

    def __init__(self, budget: int = MEMORY_BUDGET) -> None:
        self.budget = budget
        self._entries: OrderedDict[str, tuple[list[Member], int]] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def get(self, key: str, load: Callable[[], list[Member]]) -> list[Member]:
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
                return hit[0]
        members = load()
        size = sum(len(m.data) + len(m.path) + 64 for m in members)
        if size <= self.budget:
            with self._lock:
                if key not in self._entries:
                    self._entries[key] = (members, size)
                    self._size += size
                while self._size > self.budget:
                    _, (_, dropped) = self._entries.popitem(last=False)
                    self._size -= dropped
        return members


class SuiteFiles(Protocol):
    """Where a suite's archives are (``runner.suite.load.Suite``)."""

    def archive_path(self, relative: str) -> Path: ...


class LocalInputs:
    """``TrialInputs`` backed by the suite directory on this machine."""

    def __init__(
        self,
        suite: SuiteFiles,
        caps: ArchiveCaps = DEFAULT_CAPS,
        store: GitStore | None = None,
        budget: int = MEMORY_BUDGET,
    ) -> None:
        self.suite = suite
        self.caps = caps
        self.store = store or GitStore(CacheDir())
        self._members = MemberCache(budget)

    def _load(self, relative: str, pinned: str) -> list[Member]:
        path = self.suite.archive_path(relative)

        def read() -> list[Member]:
            digest = sha256_file(path)
            if digest != pinned:
                raise DigestMismatch(f"{path}: digest mismatch: pinned {pinned}, file has {digest}")
            return read_members(path, self.caps)

        return self._members.get(pinned, read)

    def fixture(self, task: RepoTask) -> list[Member]:
        if isinstance(task.repo, GitRepo):
            return self._members.get(f"tree:{task.repo_tree}", lambda: self._tree(task))
        return self._load(task.repo, task.repo_sha256)

    def _tree(self, task: RepoTask) -> list[Member]:
        assert isinstance(task.repo, GitRepo)
        source = self.suite.archive_path(task.repo.git)
        if task.repo_sha256:
            digest = sha256_file(source)
            if digest != task.repo_sha256:
                raise DigestMismatch(
                    f"{source}: digest mismatch: pinned {task.repo_sha256}, file has {digest}"
                )
        return tree_members(
            self.store, self.store.repository(source, task.repo_sha256), task, self.caps
        )

    def hidden(self, task: RepoTask) -> list[Member]:
        if task.hidden is None:
            return []
        return self._load(task.hidden, task.hidden_sha256)


def tree_members(store: GitStore, repo: Path, task: RepoTask, caps: ArchiveCaps) -> list[Member]:
    """The members of a git fixture's pinned tree (checked: the commit still has that tree)."""
    assert isinstance(task.repo, GitRepo)
    tree = store.tree_of(repo, task.repo.commit, f"task {task.id!r}")
    if tree != task.repo_tree:
        raise DigestMismatch(
            f"task {task.id!r}: commit {task.repo.commit} has tree {tree}, the task pins "
            f"{task.repo_tree}"
        )
    return read_members(store.tree_tar(repo, tree), caps)
