"""The Python version of a sandbox image, asked of its own ``python3`` in a throwaway
sandbox (``runtime.python`` pins it), and whether it is the one a pin names. Only
``python_version`` does I/O, through the ``SandboxFactory`` it is given."""

from __future__ import annotations

import re

from runner.errors import UserError
from runner.sandbox.base import ExecRequest, SandboxFactory, SandboxSpec
from runner.sandbox.end_mark import run_whole

PROBE = "import sys; sys.stdout.write('%d.%d.%d' % sys.version_info[:3])"
VERSION_RE = re.compile(r"\A\d+\.\d+\.\d+\Z")


def matches(pinned: str, found: str) -> bool:
    """``3.11`` pins any 3.11.x; ``3.11.2`` pins exactly that."""
    return found.split(".")[: len(pinned.split("."))] == pinned.split(".")


def python_version(sandboxes: SandboxFactory, spec: SandboxSpec) -> str:
    """``X.Y.Z`` of the image's python3; one line naming the image when it has none."""
    with sandboxes.open(spec) as sandbox:
        result = run_whole(
            sandbox,
            ExecRequest(
                argv=["python3", "-I", "-c", PROBE],
                env={"PATH": "/usr/local/bin:/usr/bin:/bin"},
                timeout_s=60,
                output_cap=4096,
                separate_stderr=True,
            ),
            f"image {spec.image}'s python3 version",
        )
    found = result.output.decode("utf-8", "replace").strip()
    if result.exit_code != 0 or not VERSION_RE.match(found):
        raise UserError(
            f"image {spec.image}: python3 did not say its version (exit {result.exit_code}); "
            "runtime.python needs an image with python3"
        )
    return found
