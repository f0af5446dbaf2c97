"""What ``deltarun build`` adds to the engine's own build: the machine's CPU and the wall
time of one build by ``DockerImageBuilder`` against the engine's build of the same context
with nothing around it (the baseline).

deltarun's builder watches each build of a suite's Dockerfile (hostile until proven
otherwise): every ``RUN`` step gets a memory limit and a process cap, each line of the
build log that names a step or a layer is checked with the engine, a thread kills the
running step past the deadline, and another asks the engine once a second for the size
of the step's writable layer (``runner.sandbox.build_disk``), a walk of its files. Here a
Dockerfile shaped like an install (a step writing ``--files`` small files and holding them
for a few seconds, so the size is asked several times while they are there; then a small
step) is built ``--count`` times each way, alternately, without the engine's cache. The
whole machine's CPU per build (the engine, its processes and this one) and the ratio
watched/bare (goal <= 1.10).

    python bench/build.py [--count 4] [--files 5000] [--smoke]

``--smoke``: one build each way, 200 files; a check that the benchmark runs, not a
measurement.
"""

from __future__ import annotations

import argparse
import io
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import smoke  # noqa: E402
from bench.fleet import host_busy  # noqa: E402
from runner.sandbox.engine import connect  # noqa: E402
from runner.sandbox.image_build import DockerImageBuilder  # noqa: E402
from runner.sandbox.images import BuildRequest  # noqa: E402
from tests.helpers import PY_IMAGE  # noqa: E402

HOLD_S = 4  # how long the many-file step keeps its files in its writable layer
WRITE = "[open('/tmp/w/%d' % i, 'w').write('x' * 400) for i in range(FILES)]"


def context(files: int) -> bytes:
    """The build context: a Dockerfile only."""
    write = WRITE.replace("FILES", str(files))
    dockerfile = (
        f"FROM {PY_IMAGE}\n"
        f'RUN mkdir /tmp/w && python3 -c "{write}" && sleep {HOLD_S}\n'
        "RUN echo done > /tmp/done\n"
    ).encode()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        tar.addfile(info, io.BytesIO(dockerfile))
    return buffer.getvalue()


def bare(client: Any, tar: bytes) -> str:
    """The engine's build, nothing around it: the baseline."""
    image = ""
    for event in client.build(
        fileobj=io.BytesIO(tar), custom_context=True, nocache=True, rm=True, forcerm=True,
        network_mode="none", pull=False, decode=True,
    ):  # fmt: skip
        if "error" in event:
            raise SystemExit(f"bench/build.py: the bare build failed: {event['error']}")
        aux = event.get("aux")
        if isinstance(aux, dict) and "ID" in aux:
            image = str(aux["ID"])
    return image


def watched(client: Any, tar: bytes) -> str:
    """deltarun's build of the same context, every watch at its default."""
    request = BuildRequest(buildargs={}, labels={}, network="none", nocache=True)
    return DockerImageBuilder(client).build(io.BytesIO(tar), request, lambda line: None)


def measure(client: Any, build: Callable[[Any, bytes], str], tar: bytes) -> tuple[float, float]:
    """(machine CPU-s, wall s) of one build; the image removed after."""
    start_cpu, start = host_busy(), time.monotonic()
    image = build(client, tar)
    figures = host_busy() - start_cpu, time.monotonic() - start
    client.remove_image(image, force=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=4)
    parser.add_argument("--files", type=int, default=5000)
    smoke.add_flag(parser)
    args = parser.parse_args()
    if args.smoke:
        args.count, args.files = 1, 200
        smoke.announce("build", "one build each way, 200 files")
    client = connect()
    tar = context(args.files)
    runs: dict[str, list[tuple[float, float]]] = {"bare": [], "watched": []}
    for _ in range(args.count):  # alternately: a load that drifts hits both
        runs["bare"].append(measure(client, bare, tar))
        runs["watched"].append(measure(client, watched, tar))
    mean = {
        name: (sum(cpu for cpu, _ in found) / len(found), sum(w for _, w in found) / len(found))
        for name, found in runs.items()
    }
    for name, (cpu, wall) in mean.items():
        spread = ", ".join(f"{cpu:.2f}" for cpu, _ in runs[name])
        print(f"build: {name:7s} {cpu:6.2f} CPU-s, {wall:5.1f} s per build (CPU-s: {spread})")
    print(
        f"build: {args.files} files held {HOLD_S} s, {args.count} builds each way: "
        f"ratio watched/bare CPU {mean['watched'][0] / mean['bare'][0]:.2f} (goal <= 1.10), "
        f"wall {mean['watched'][1] / mean['bare'][1]:.2f}"
    )


if __name__ == "__main__":
    main()
