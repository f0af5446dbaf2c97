"""Files replaced whole or not at all.

The bytes go to a temporary file beside the target (same directory, so the rename
stays on one filesystem), are flushed to disk, and the temporary is renamed over
the target. A reader sees the old file or the new one, never half of one; a write
that fails or is interrupted leaves the old file and removes its temporary.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def write_atomic(path: Path, data: bytes | Callable[[BinaryIO], object]) -> None:
    """Replace ``path`` with ``data``, or with what ``data(out)`` writes to ``out``.
    The file keeps its permission bits; a new one gets 0644."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        mode = 0o644
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as out:
            if isinstance(data, bytes):
                out.write(data)
            else:
                data(out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
