"""The wheels of a spec's ``pip_packages``, fetched on this machine with the user's own pip
(a proxy, a private index or an offline cache just work) for the environment image's
Python, into the build context: the image build installs them with no network."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from runner.agents.installed.fetch import Target, platform_flags
from runner.errors import UserError
from runner.swebench.specs import Spec

DEFAULT_PYTHON = (3, 11)  # the sandbox image's (Debian bookworm)
GLIBC = (2, 36)  # Debian bookworm's
# The glibc of the Debian release whose python3 is that Python (the sandbox bases):
# a wheel for a newer glibc would not install there.
GLIBC_OF = {(3, 9): (2, 31), (3, 11): GLIBC, (3, 13): (2, 41)}
FETCH_TIMEOUT_S = 900.0
_NO_MATCH = re.compile(r"No matching distribution found for (\S{1,200})")


def python_of(spec: Spec) -> tuple[int, int]:
    """The Python the environment image runs: the spec's ``python``, else the sandbox's."""
    if not spec.python:
        return DEFAULT_PYTHON
    major, minor = (int(part) for part in spec.python.split("."))
    return major, minor


def fetch_wheels(spec: Spec, where: str, into: Path, say: Callable[[str], None]) -> None:
    """Download exactly the pinned wheels (no dependencies: the pins are the whole list);
    ``where`` (the specs file, repo and version) leads the one line of a failure."""
    major, minor = python_of(spec)
    into.mkdir(parents=True, exist_ok=True)
    say(f"import: fetching {' '.join(spec.pip_packages)} for Python {major}.{minor}")
    done = download(spec.pip_packages, into, (major, minor))
    if done.returncode != 0:
        said = last_line(done.stderr)
        missing = _NO_MATCH.search(said)
        lead = f"{where}: pip_packages: "
        if missing is None:
            raise UserError(
                f"{lead}pip could not fetch {' '.join(spec.pip_packages)} for Python "
                f"{major}.{minor}: {said}"
            )
        raise UserError(
            f"{lead}no wheel of {missing.group(1)} for Python {major}.{minor} ({said}); "
            "deltarun installs wheels only, fetched on this machine (building one from "
            "source would run its code here): pin a version that has a wheel for Python "
            f"{major}.{minor}, or make such a wheel reachable to this machine's pip "
            "(PIP_FIND_LINKS)"
        )


def download(
    requirements: Sequence[str], into: Path, python: tuple[int, int]
) -> subprocess.CompletedProcess[str]:
    """``pip download --no-deps`` of ``requirements`` into ``into``: wheels only, for
    CPython ``python`` on the glibc of its sandbox base (``GLIBC_OF``)."""
    flags = platform_flags(Target(python, GLIBC_OF.get(python, GLIBC)))
    argv = [
        sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", "download",
        "--no-deps", "-d", str(into), *flags, *requirements,
    ]  # fmt: skip
    try:
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=FETCH_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise UserError(f"pip download {' '.join(requirements)} took too long") from exc


def last_line(stderr: str) -> str:
    """pip's last word (the error it ended on), at most 300 characters."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()] or ["?"]
    return lines[-1][:300]
