"""Answers asked of an image once per machine, kept in the deltarun cache.

Some questions deltarun asks a sandbox image cost a sandbox and a walk of its files each
time (what it can import: ``runner.grading.image_facts``; whether it has what the harness
needs and no setuid file: ``runner.sandbox.preflight``). Their answers depend only on
what they are keyed by: content addresses (the image ID, a digest of the asking script)
and the question's own words. So an answer is kept on disk under a digest of its key
(``facts/<key>.json``, ``runner.trees.cache``) and is never stale: another image, script
or question is another key.

The one who reads a kept answer checks it as it checks a fresh one and asks again when it
fails the checks. A cache that cannot be read, written or locked costs an extra asking,
never a wrong answer or a failed run.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from runner.trees.cache import default_root


def kept_path(*key: str) -> Path:
    """Where the answer to the question ``key`` (its parts, in order) is kept. The parts
    are digested as a JSON list: no two different keys read alike, whatever they hold."""
    digest = hashlib.sha256(json.dumps(key, ensure_ascii=True).encode()).hexdigest()
    return default_root() / "facts" / f"{digest}.json"


@contextmanager
def machine_lock(kept: Path) -> Iterator[None]:
    """Held while one process reads, or asks and keeps, the answer kept at ``kept`` (a lock
    file beside it): processes that want the same answer at once wait for one asking. A
    cache where no lock can be taken only costs an asking more."""
    try:
        kept.parent.mkdir(parents=True, exist_ok=True)
        handle = os.open(kept.parent / f".lock-{kept.stem}", os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        yield
        return
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)  # the lock goes with the descriptor


def read_kept(path: Path, max_bytes: int) -> bytes | None:
    """The answer kept at ``path``, None when there is none or it is over ``max_bytes`` (the
    caller checks the rest). Marked as used now: the cache evicts the least recently used
    first."""
    try:
        with path.open("rb") as kept:
            answer = kept.read(max_bytes + 1)
    except OSError:
        return None
    if len(answer) > max_bytes:
        return None
    try:
        os.utime(path)
    except OSError:
        pass  # a cache this process may read but not write
    return answer


def keep(path: Path, answer: bytes) -> None:
    """Write ``answer`` to ``path`` whole or not at all; a cache that cannot be written
    costs the next process an asking, nothing else."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, part = tempfile.mkstemp(prefix=".part-", dir=path.parent)
    except OSError:
        return
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(answer)
        os.replace(part, path)
    except OSError:
        Path(part).unlink(missing_ok=True)
