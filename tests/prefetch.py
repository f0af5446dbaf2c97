"""Fetch, before pytest starts, what the tests would otherwise fetch and build on first use:
the sdists of ``tests.realprojects`` and ``tests.fieldshapes`` (into their cache, pinned by
sha256), and the four installed agent CLIs at the versions ``tests/test_installed_e2e.py``
runs, fetched into the user's cache (``~/.cache/deltarun/agents``, as a run would) and
layered onto the sandbox image. Each step is skipped when its result is already there, so a
second call costs a few seconds. ``make test`` runs it (``make test-inputs``).

    python -m tests.prefetch
"""

from __future__ import annotations

import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import docker.errors

from runner.errors import UserError


def _sdists() -> None:
    from tests.fieldshapes import SHAPES
    from tests.realprojects.build import PROJECTS, cache_dir, sdist

    projects = {p.sdist: p for p in (*PROJECTS, *(shape.project for shape in SHAPES))}
    for project in projects.values():
        sdist(project, cache_dir())
    print(f"test inputs: {len(projects)} sdists in {cache_dir()}")


def _agent_layers() -> None:
    if shutil.which("npm") is None:  # as the tests that use them: a skip, a failure in CI
        print("test inputs: npm is not installed: no agent CLIs fetched (their tests skip)")
        return

    from runner.agents.installed.catalogue import KINDS
    from runner.agents.installed.layer import AgentImages
    from runner.sandbox.engine import connect
    from runner.sandbox.image_build import DockerImageBuilder
    from tests.helpers import PY_IMAGE
    from tests.test_installed_e2e import AGENT_CACHE, VERSIONS

    builder = DockerImageBuilder(connect(api_timeout_s=600))
    images = AgentImages(builder, builder, lambda line: print(f"  {line}", flush=True), AGENT_CACHE)

    def layer(name: str, version: str) -> None:
        started = time.monotonic()
        image = images.ensure(KINDS[name], version, PY_IMAGE)
        how = "present" if image.reused else f"layered in {time.monotonic() - started:.0f} s"
        print(f"test inputs: {name} {version} on {PY_IMAGE}: {how}", flush=True)

    # Two at a time: one fetches from its registry while the other builds.
    with ThreadPoolExecutor(max_workers=2) as pool:
        for done in [pool.submit(layer, n, v) for n, v in VERSIONS.items()]:
            done.result()


def main() -> int:
    try:
        _sdists()
        _agent_layers()
    except UserError as exc:
        print(f"test inputs: {exc}", file=sys.stderr)
        return 1
    except docker.errors.DockerException as exc:
        print(f"test inputs: the Docker engine: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
