"""What a run's preflight costs the machine: CPU per preflight with the image's answers
kept on this machine, against asking the image each time (the baseline).

Every ``deltarun run``, ``validate`` and worker start checks its sandbox image first
(``DockerSandboxFactory.preflight``): one sandbox with the run's limits, runtime and
network, and in it the harness check (tools, the agent user, no setuid file: a ``find``
over the image's whole file system) and the lookup of the agent's commands. The answers
depend only on the image's ID, so they are kept in the deltarun cache
(``runner.trees.kept``); the sandbox is still opened each time, since the engine must
accept the limits.

Here: ``--count`` preflights of the sandbox image, each with an empty cache (the baseline:
both checks run), then as many with the answers kept; and as many sandboxes opened and
closed with nothing run in them (the floor). The whole machine's CPU per preflight (the
engine, its processes and this one), and the ratio kept/baseline (goal <= 0.60).

    python bench/preflight.py [--count 10] [--smoke]

``--smoke``: 2 of each; a check that the benchmark runs, not a measurement.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import smoke  # noqa: E402
from bench.fleet import host_busy  # noqa: E402
from runner.sandbox.base import Limits, SandboxSpec  # noqa: E402
from runner.sandbox.docker import DockerSandboxFactory  # noqa: E402
from runner.sandbox.engine import connect  # noqa: E402
from tests.helpers import PY_IMAGE  # noqa: E402

COMMANDS = ["git", "python3"]  # a command agent's argv[0] and one more


def per_call(count: int, call: Callable[[int], object]) -> tuple[float, float]:
    """(machine CPU-s, wall s) per call of ``call``, over ``count`` calls."""
    start_cpu, start = host_busy(), time.monotonic()
    for i in range(count):
        call(i)
    return (host_busy() - start_cpu) / count, (time.monotonic() - start) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10)
    smoke.add_flag(parser)
    args = parser.parse_args()
    if args.smoke:
        args.count = 2
        smoke.announce("preflight", "2 of each")
    factory = DockerSandboxFactory(connect())
    spec = SandboxSpec(
        image=PY_IMAGE,
        limits=Limits(
            memory_bytes=1 << 30, nano_cpus=1_000_000_000, pids=256, workspace_bytes=256 << 20
        ),
        lifetime_s=60,
        labels={"run": f"bench-preflight-{uuid.uuid4().hex[:8]}", "job": "preflight"},
    )
    with tempfile.TemporaryDirectory(prefix="deltarun-bench-preflight-") as tmp:
        previous = os.environ.get("DELTARUN_CACHE")
        try:

            def fresh(i: int) -> object:
                os.environ["DELTARUN_CACHE"] = str(Path(tmp) / f"empty-{i}")
                return factory.preflight(spec, COMMANDS)

            def opened(i: int) -> None:
                with factory.open(spec):
                    pass

            factory.preflight(spec, COMMANDS)  # the engine warm, the image's ID looked up
            baseline = per_call(args.count, fresh)
            os.environ["DELTARUN_CACHE"] = str(Path(tmp) / "kept")
            factory.preflight(spec, COMMANDS)  # asked once: kept
            kept = per_call(args.count, lambda i: factory.preflight(spec, COMMANDS))
            floor = per_call(args.count, opened)
        finally:
            if previous is None:
                os.environ.pop("DELTARUN_CACHE", None)
            else:
                os.environ["DELTARUN_CACHE"] = previous
    for name, (cpu, wall) in (
        ("asked each time", baseline),
        ("answers kept", kept),
        ("floor: the sandbox alone", floor),
    ):
        print(f"preflight: {name}: {cpu:.3f} CPU-s, {wall:.3f} s a preflight")
    ratio = kept[0] / max(baseline[0], 1e-9)
    print(f"preflight: ratio kept/asked {ratio:.2f} (goal <= 0.60)")


if __name__ == "__main__":
    main()
