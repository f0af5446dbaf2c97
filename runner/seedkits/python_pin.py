"""Seed 000's ``runtime.python``: the sandbox image's own Python, checked and pinned.

The import writes ``runtime.python`` into the controls (``deltarun run`` checks it
before every run) and also pins the image by ID (``images: {reference: sha256:...}``).
Here it asks that very image ID, in a throwaway sandbox, which Python its ``python3``
is (the interpreter the agent, the harness and the tests run), by
``runner.sandbox.python_version``, and refuses, exit 3, when that is not the
protocol's: one line naming the image, the pinned and the found version.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from runner.config.controls import Controls
from runner.errors import DigestMismatch, SandboxError, UserError
from runner.sandbox.docker import DockerSandboxFactory
from runner.sandbox.engine import connect, image_id
from runner.sandbox.python_version import matches, python_version
from runner.trial.sandbox_specs import preflight_spec


@dataclass(frozen=True)
class PythonPin:
    """The image the run will use, its ID, and the Python version found in it."""

    image: str
    image_id: str
    found: str


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
        found = python_version(DockerSandboxFactory(client), spec)
    except SandboxError as exc:
        raise UserError(
            f"image {image}: asking its python3 for its version failed ({exc})"
        ) from exc
    if not matches(pinned, found):
        raise DigestMismatch(
            f"{source}: runtime.python pins {pinned}, image {image} ({found_id[:19]}) has "
            f"Python {found}; pass --image with an image of Python {pinned}, or change the pin "
            "(a new protocol)"
        )
    return PythonPin(image, found_id, found)
