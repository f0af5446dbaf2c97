"""``bench/fleet.py --smoke`` runs end to end: a real Redis, the real coordinator and two
small fleets of bench workers (2 and 4 processes), then bare Celery with as many.

Its figures are parsed, not judged against goals (timings on a shared machine say
nothing), but each must be there and positive: a fleet that recorded nothing, a CPU or
memory probe that reads zero, or a missing bottleneck line fails the test.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
NUMBER = r"([\d,]+(?:\.\d+)?)"
SIZES = (2, 4)

# Per fleet: the lines it must print, each with the numbers captured that must be positive.
PER_FLEET = [
    rf"workers: {NUMBER} jobs in {NUMBER} s: {NUMBER} jobs/s end to end$",
    rf"workers: coordinator CPU {NUMBER} s per 1,000 records \({NUMBER} of one core\)$",
    rf"workers: Redis used_memory peak {NUMBER} MiB, after {NUMBER} MiB, after gc --broker "
    rf"{NUMBER} MiB \(before {NUMBER} MiB;",
    rf"workers: Redis CPU {NUMBER} of one core \({NUMBER} ms per job\)$",
    rf"workers: workers CPU {NUMBER} cores \(.* {NUMBER} ms per job\); host {NUMBER} of",
    rf"workers: bare Celery no-op {NUMBER} jobs: {NUMBER} jobs/s, deltarun path {NUMBER} "
    rf"jobs/s, ratio {NUMBER} \(goal",
]
# Per fleet, present with numbers that may round to zero at the smoke size.
PRESENT = [
    rf"workers: dispatch: every job sent within {NUMBER} s of the run's {NUMBER} s \({NUMBER} "
    rf"jobs/s\); the queue held {NUMBER} jobs on average meanwhile \(peak {NUMBER}\)",
    rf"workers: coordinator CPU split: send jobs {NUMBER}%, collect records \+ ledger {NUMBER}%",
]
GROWTH = [
    rf"jobs/s {NUMBER} -> {NUMBER} \(x{NUMBER}\)$",
    rf"coordinator CPU s per 1,000 records {NUMBER} -> {NUMBER} \(x{NUMBER}\)$",
    rf"Redis used_memory peak MiB {NUMBER} -> {NUMBER} \(x{NUMBER}\)$",
]


def numbers(pattern: str, text: str) -> list[float]:
    found = re.findall(pattern, text, re.MULTILINE)
    assert len(found) == 1, f"no single line matches {pattern!r}\n{text}"
    groups = found[0] if isinstance(found[0], tuple) else (found[0],)
    return [float(g.replace(",", "")) for g in groups]


@pytest.mark.docker
def test_fleet_smoke(docker_api: Any, redis_server: Any) -> None:
    # redis_server and docker_api are the availability gates (a skip on a laptop, a failure
    # with CI=true); the bench workers' start-up checks need the engine and sandbox image,
    # and bench/fleet.py starts its own redis-server on a free loopback port.
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "fleet.py"), "--smoke"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    out = done.stdout
    context = f"stdout:\n{out[-6000:]}\nstderr:\n{done.stderr[-4000:]}"
    assert done.returncode == 0, f"bench/fleet.py --smoke exited {done.returncode}\n{context}"
    assert "--smoke: " in out.split("\n", 1)[0], context
    for size in SIZES:
        for pattern in PER_FLEET:
            values = numbers(rf"^fleet: +{size} {pattern}", out)
            assert all(v > 0 for v in values), f"{size} workers, {pattern!r}: {values}\n{context}"
        for pattern in PRESENT:
            values = numbers(rf"^fleet: +{size} {pattern}", out)
            assert all(v >= 0 for v in values), f"{size} workers, {pattern!r}: {values}\n{context}"
        jobs = numbers(rf"^fleet: +{size} {PER_FLEET[0]}", out)[0]
        assert jobs == 100 * size // 2, context  # the job count scales with the fleet
    for pattern in GROWTH:
        values = numbers(rf"^fleet: growth 2 -> 4 workers: {pattern}", out)
        assert all(v > 0 for v in values), f"{pattern!r}: {values}\n{context}"
    bottleneck = [line for line in out.splitlines() if line.startswith("fleet: first bottleneck")]
    assert len(bottleneck) == 1, context
    assert re.search(
        r"jobs/s: (coordinator CPU|Redis CPU|the coordinator's dispatch|the workers)", bottleneck[0]
    ), context
    assert re.search(rf"the next limit is .* at ~{NUMBER} jobs/s", bottleneck[0]), context
