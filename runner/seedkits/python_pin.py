"""Seed 000's ``runtime.python``: the sandbox image's own Python, checked and pinned.

deltarun's controls have no Python field; what they pin is the image, by ID
(``images: {reference: sha256:...}``), which ``deltarun run`` checks before any
sandbox (exit 3 when the tag names another image) and the scored channel requires.
So the import asks the image itself, in a sandbox made from the very image ID it
pins, which Python its ``python3`` is (the interpreter the agent, the harness and
the tests run) and refuses, exit 3, when that is not the protocol's: one line
naming the image, the pinned and the found version. Pinning that image ID then
pins the Python version for every later run.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from runner.config.model import Controls
from runner.errors import DigestMismatch, SandboxError, UserError
from runner.sandbox.base import ExecRequest
from runner.sandbox.docker import DockerSandboxFactory
from runner.sandbox.engine import connect, image_id
from runner.trial.execute import preflight_spec

PROBE = "import sys; sys.stdout.write('%d.%d.%d' % sys.version_info[:3])"
VERSION_RE = re.compile(r"^\d+\.\d+\.\d+$")


@dataclass(frozen=True)
class PythonPin:
    """The image the run will use, its ID, and the Python version found in it."""

    image: str
    image_id: str
    found: str


def matches(pinned: str, found: str) -> bool:
    """``3.11`` pins any 3.11.x; ``3.11.2`` pins exactly that."""
    return found.split(".")[: len(pinned.split("."))] == pinned.split(".")


def pin_python(controls: Controls, pinned: str, source: str) -> PythonPin:
    """Ask ``runtime.image`` its Python; ``DigestMismatch`` when it is not ``pinned``."""
    client = connect()
    image = controls.runtime.image
    found_id = image_id(client, image)
    spec = dataclasses.replace(
        preflight_spec(controls, image),
        image_id=found_id,
        labels={"run": "import", "job": "python-pin"},
    )
    try:
        with DockerSandboxFactory(client).open(spec) as sandbox:
            result = sandbox.run(
                ExecRequest(
                    argv=["python3", "-I", "-c", PROBE],
                    env={"PATH": "/usr/local/bin:/usr/bin:/bin"},
                    timeout_s=60,
                    output_cap=4096,
                    separate_stderr=True,
                )
            )
    except SandboxError as exc:
        raise UserError(
            f"image {image}: asking its python3 for its version failed ({exc})"
        ) from exc
    found = result.output.decode("utf-8", "replace").strip()
    if result.exit_code != 0 or not VERSION_RE.match(found):
        raise UserError(
            f"image {image}: python3 did not say its version (exit {result.exit_code}); the "
            "sandbox image needs python3 (build it from worker_images/python)"
        )
    if not matches(pinned, found):
        raise DigestMismatch(
            f"{source}: runtime.python pins {pinned}, image {image} ({found_id[:19]}) has "
            f"Python {found}; pass --image with an image of Python {pinned}, or change the pin "
            "(a new protocol)"
        )
    return PythonPin(image, found_id, found)
