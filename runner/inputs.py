"""Task archives from the local suite directory, digest-checked and cached in memory.

Each archive is re-hashed against its pin when first read by this process, so
a file changed after ``run`` started its checks is caught before it reaches a
sandbox. Remote workers use a content-addressed cache instead (distribution).
"""

from __future__ import annotations

import threading

from runner.archives import Member, read_members
from runner.errors import DigestMismatch
from runner.hashing import sha256_bytes
from runner.models import RepoTask
from runner.suite import Suite


class LocalInputs:
    """``TrialInputs`` backed by the suite directory on this machine."""

    def __init__(self, suite: Suite) -> None:
        self.suite = suite
        self._cache: dict[str, list[Member]] = {}
        self._lock = threading.Lock()

    def _load(self, relative: str, pinned: str) -> list[Member]:
        path = self.suite.archive_path(relative)
        with self._lock:
            cached = self._cache.get(pinned)
            if cached is not None:
                return cached
            data = path.read_bytes()
            digest = sha256_bytes(data)
            if digest != pinned:
                raise DigestMismatch(f"{path}: digest mismatch: pinned {pinned}, file has {digest}")
            members = read_members(path)
            self._cache[pinned] = members
            return members

    def fixture(self, task: RepoTask) -> list[Member]:
        return self._load(task.repo, task.repo_sha256)

    def hidden(self, task: RepoTask) -> list[Member]:
        if task.hidden is None:
            return []
        return self._load(task.hidden, task.hidden_sha256)
