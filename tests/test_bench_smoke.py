"""Every benchmark of ``bench/`` runs once at its smallest size (``--smoke``, ``bench/smoke.py``)
as a subprocess of this interpreter, from the repository root: it must exit 0 and print its
ratio lines against the baseline it measured. The figures are parsed, never judged: timings
on a shared CI machine say nothing, a benchmark that no longer runs does."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
NUMBER = r"(-?\d+(?:\.\d+)?)"

# Each benchmark and the lines it must print, one number (a ratio) captured in each.
RATIOS: dict[str, list[str]] = {
    "overhead.py": [rf"^overhead: ratio trials/floor: +{NUMBER} "],
    "dispatch.py": [
        rf"^dispatch: -c 1: bare Celery no-op .* jobs/s, ratio {NUMBER} \(goal",
        rf"^dispatch: -c 1: deltarun path plain redis:// .* ratio TLS/plain {NUMBER} \(goal",
        rf"^dispatch: signing \(always on\): .* = {NUMBER}% of -c 1's ",
        rf"^dispatch: coordinator memory growth .*: 1 -> {NUMBER} MiB, ",
    ],
    "scoring.py": [
        rf"^scoring: baseline json\.loads of every line .* parse / json\.loads {NUMBER}x$"
    ],
    "tools.py": [
        rf"^tools: checked read_file tool calls: .* ratio {NUMBER}$",
        rf"^tools: tool-loop turns \(model\+call\): .* ratio {NUMBER}$",
    ],
    "fixtures.py": [
        rf"^fixtures: large/tiny per trial, tar fixtures: +{NUMBER}x$",
        rf"^fixtures: large/tiny per trial, git trees: +{NUMBER}x ",
        rf"^fixtures: the copy path \(DELTARUN_WORKSPACES=copy\): .* per trial: {NUMBER}x; ",
        rf"^fixtures: peak RSS, 1 large fixture .*: {NUMBER}x ",
    ],
    "patch_memory.py": [rf"^patch memory: peak RSS: .* = {NUMBER} x the cap$"],
    "view_open.py": [rf"^view: ratio served/parse {NUMBER} "],
    "key_scrub.py": [
        rf"^key scrub: {kind}, .* floor \(lower \+ find\) .* s, ratio {NUMBER}$"
        for kind in ("prose", "filler", "worst")
    ],
    "relay_reads.py": [rf"^relay reads: ratio relay/baseline {NUMBER} \(goal"],
    "preflight.py": [rf"^preflight: ratio kept/asked {NUMBER} \(goal"],
    "build.py": [rf"^build: .* ratio watched/bare CPU {NUMBER} \(goal"],
    # nan when the auto worker settled too late in a smoke-sized run to measure it there
    "pacing.py": [r"^pacing: settled throughput / best fixed = (-?\d+(?:\.\d+)?|nan) \(goal"],
    # smoke-run (and its figures parsed) by tests/test_bench_fleet.py
    "fleet.py": [rf"^fleet: +\d+ workers: bare Celery no-op .* ratio {NUMBER} \(goal"],
}


def smoke_run(script: str, timeout: float = 240) -> str:
    """``bench/<script> --smoke``; its output, once it exited 0 and printed each ratio line."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), "--smoke"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    output = f"stdout:\n{done.stdout[-4000:]}\nstderr:\n{done.stderr[-4000:]}"
    assert done.returncode == 0, f"bench/{script} --smoke exited {done.returncode}\n{output}"
    assert "--smoke: " in done.stdout.split("\n", 1)[0], output  # it ran at the smoke size
    for pattern in RATIOS[script]:
        found = re.findall(pattern, done.stdout, re.MULTILINE)
        assert len(found) == 1, f"bench/{script}: no line matches {pattern!r}\n{output}"
        float(found[0])  # a number, whatever its value
    return done.stdout


def test_every_benchmark_has_a_smoke_test() -> None:
    """`make bench` runs only benchmarks tested here, each with the --smoke flag."""
    makefile = (ROOT / "Makefile").read_text()
    target = makefile.split("\nbench:", 1)[1].split("\n\n", 1)[0]
    in_make = set(re.findall(r"bench/(\w+\.py)", target))
    assert in_make, "the Makefile's bench target runs no bench/*.py"
    assert in_make <= set(RATIOS), in_make - set(RATIOS)
    with_flag = {
        p.name for p in (ROOT / "bench").glob("*.py") if "smoke.add_flag(" in p.read_text()
    }
    assert with_flag == set(RATIOS)


def test_scoring_smoke() -> None:
    smoke_run("scoring.py")


@pytest.mark.docker
def test_overhead_smoke(docker_api: Any) -> None:
    smoke_run("overhead.py")


@pytest.mark.docker
def test_dispatch_smoke(docker_api: Any, redis_server: Any) -> None:
    # redis_server is the availability gate (a skip here, a failure with CI=true);
    # bench/dispatch.py starts its own plain and TLS servers on free loopback ports.
    smoke_run("dispatch.py")


@pytest.mark.docker
def test_tools_smoke(docker_api: Any) -> None:
    smoke_run("tools.py")


@pytest.mark.docker
def test_fixtures_smoke(docker_api: Any) -> None:
    smoke_run("fixtures.py")


@pytest.mark.docker
def test_patch_memory_smoke(docker_api: Any) -> None:
    smoke_run("patch_memory.py")


def test_view_open_smoke() -> None:
    smoke_run("view_open.py")


@pytest.mark.docker
def test_relay_reads_smoke(docker_api: Any) -> None:
    smoke_run("relay_reads.py")


@pytest.mark.docker
def test_preflight_smoke(docker_api: Any) -> None:
    smoke_run("preflight.py")


@pytest.mark.docker
def test_build_smoke(docker_api: Any) -> None:
    smoke_run("build.py")


def test_key_scrub_smoke() -> None:
    smoke_run("key_scrub.py")


@pytest.mark.docker
def test_pacing_smoke(docker_api: Any, redis_server: Any) -> None:
    # bench/pacing.py starts its own Redis server, workers and coordinators.
    smoke_run("pacing.py")
