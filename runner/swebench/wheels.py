"""The wheels of a spec's ``pip_packages``, fetched on this machine with the user's own pip
(a proxy, a private index or an offline cache just work) for the environment image's
Python, into the build context: the image build installs them with no network."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from runner.agents.installed.fetch import Target, platform_flags
from runner.errors import UserError
from runner.swebench.specs import Spec

DEFAULT_PYTHON = (3, 11)  # the sandbox image's (Debian bookworm)
GLIBC = (2, 36)  # Debian bookworm's
FETCH_TIMEOUT_S = 900.0


def fetch_wheels(spec: Spec, into: Path, say: Callable[[str], None]) -> None:
    """Download exactly the pinned wheels (no dependencies: the pins are the whole list)."""
    major, minor = (int(p) for p in spec.python.split(".")) if spec.python else DEFAULT_PYTHON
    flags = platform_flags(Target((major, minor), GLIBC))
    into.mkdir(parents=True, exist_ok=True)
    say(f"import: fetching {' '.join(spec.pip_packages)} for Python {major}.{minor}")
    argv = [
        sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", "download",
        "--no-deps", "-d", str(into), *flags, *spec.pip_packages,
    ]  # fmt: skip
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=FETCH_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise UserError(f"pip download {' '.join(spec.pip_packages)} took too long") from exc
    if done.returncode != 0:
        lines = [line.strip() for line in done.stderr.splitlines() if line.strip()] or ["?"]
        raise UserError(
            f"pip could not fetch {' '.join(spec.pip_packages)} for Python {major}.{minor}: "
            f"{lines[-1][:300]}"
        )
