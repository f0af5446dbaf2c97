"""What a sandbox image can import, asked of the image itself, once per image per process.

The grading policy drops a patch's new top-level module when its name is one the
image already imports (``runner.grading.policy``). Those names are not typed by
hand: ``image_modules.py`` lists them inside a fresh sandbox of the image, with
the image's own interpreter, isolated from any working directory. The answer is
cached by image ID (content-addressed, so the cache can never be stale) and is
the same on every worker and in ``replay --reverify``.
"""

from __future__ import annotations

import threading

from runner.bounded_json import BoundsError, JsonBounds, loads_bounded
from runner.errors import InfraError
from runner.fixtures.archives import single_file_tar
from runner.sandbox.base import ROOT_USER, WORKSPACE, ExecRequest, SandboxFactory, SandboxSpec
from runner.sandbox_scripts import source

SCRIPT = "image_modules.py"  # runner/sandbox_scripts/image_modules.py
_LOCK = threading.Lock()
_MODULES: dict[str, frozenset[str]] = {}
_BOUNDS = JsonBounds(max_bytes=8 << 20, max_depth=2, max_items=1_000_000)


def module_names(sandboxes: SandboxFactory, spec: SandboxSpec, image_id: str) -> frozenset[str]:
    """The top-level module names the image of ``spec`` (ID ``image_id``) can import."""
    with _LOCK:
        known = _MODULES.get(image_id)
    if known is not None:
        return known
    names = _probe(sandboxes, spec)
    with _LOCK:
        _MODULES[image_id] = names
    return names


def _probe(sandboxes: SandboxFactory, spec: SandboxSpec) -> frozenset[str]:
    with sandboxes.open(spec) as sandbox:
        sandbox.put_archive(
            WORKSPACE, single_file_tar(SCRIPT, source(SCRIPT), uid=0, gid=0, mode=0o444)
        )
        result = sandbox.run(
            ExecRequest(
                argv=["python3", "-I", f"{WORKSPACE}/{SCRIPT}"],
                user=ROOT_USER,
                workdir="/",
                env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"},
                timeout_s=60,
                output_cap=8 << 20,
                separate_stderr=True,
            )
        )
    if result.exit_code != 0 or result.output_truncated:
        tail = (result.stderr or result.output)[-300:].decode("utf-8", "replace")
        raise InfraError(
            f"listing the modules of image {spec.image!r} failed (exit {result.exit_code}): {tail}"
        )
    try:
        names = loads_bounded(result.output, _BOUNDS)
    except BoundsError as exc:
        raise InfraError(f"the module list of image {spec.image!r} is unreadable ({exc})") from exc
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise InfraError(f"the module list of image {spec.image!r} is not a list of names")
    return frozenset(names)
