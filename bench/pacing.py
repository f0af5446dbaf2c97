"""``-c auto`` against fixed ``-c``: the level a pacing worker settles at on this machine, the
throughput of that level against the best fixed ``-c`` measured in the same run, and the
start (no burst).

One fresh ``redis-server``; a suite of repository tasks on the Docker engine, two arms (a
noop control and an agent that computes for about a second, then fixes the task), so each
trial has two sandboxes and real CPU work. The suite goes to one ``deltarun worker`` with
``-c 1``, ``-c 2``, ... ``-c MAX``, twice by default (up, then down: other work on a
shared host moves single runs by a third, and a drifting load then hits every level);
each level's throughput is the mean of its passes. Between the passes, a suite three
times as long (room to ramp up, then settle) goes to ``-c auto --max MAX`` at its default
settings. Throughput is the steady pace of a run: trials per minute between the 10th and
the 90th percentile of the finish times (no start, no tail). Printed: each fixed level's
throughput; the auto worker's level changes with their reasons; the level it settled at
(its last level, and how long it held it) and its throughput there (the trials started
after the last change) over the best fixed level's (goal >= 0.90); that level's fixed
throughput over the best; the auto run's throughput as a whole, its ramp included; and
the most trials in flight before its first raise (no burst: 1).

    python bench/pacing.py [--max 4] [--tasks 12] [--passes 2] [--smoke]

``--smoke``: ``--max 2`` on 3 tasks (6 for the auto worker), one pass, shorter holds and
a tenth of the work per trial; what the numbers look like, not a measurement. Needs
``redis-server`` (``make redis``) and the sandbox image (``make images``).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import smoke  # noqa: E402
from tests.distributed_support import (  # noqa: E402
    Proc,
    RedisServer,
    ledger_lines,
    start_coordinator,
    start_worker,
)
from tests.helpers import ADD_GOLD, make_suite, repo_task, write_agent  # noqa: E402

os.environ.setdefault("DELTARUN_JOB_KEY", "bench-" + os.urandom(16).hex())
# Production lease and re-enqueue settings (tests.distributed_support shortens them).
PRODUCTION = {"DELTARUN_LEASE_TTL_S": "30", "DELTARUN_REQUEUE_CHECK_S": "5"}
WORK = "python3 -c 'sum(i * i for i in range({}))'\n"
STEPS = 4_000_000  # the agent's CPU work per trial (a tenth of it in a smoke run)


def suite(root: Path, tasks: int, steps: int = STEPS) -> Path:
    work = WORK.format(steps)
    agent = write_agent(root, "busy", f"{work}sed -i 's/a - b/a + b/' calc/__init__.py\n")
    (root / "gold").mkdir(exist_ok=True)
    for i in range(tasks):
        (root / "gold" / f"t{i}.diff").write_text(ADD_GOLD)
    return make_suite(
        root,
        [repo_task(f"t{i}", timeout_s=120) for i in range(tasks)],
        [
            {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
            {"name": "busy", "agent": agent},
        ],
    )


def stamp(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def figures(records: list[dict[str, Any]]) -> tuple[float, float, float]:
    """(trials per minute, first start, last finish) of a run's records."""
    first = min(stamp(r["started_at"]) for r in records)
    last = max(stamp(r["finished_at"]) for r in records)
    return 60 * len(records) / (last - first), first, last


def steady(finishes: list[float]) -> float:
    """Trials per minute between the 10th and the 90th percentile of the finish times: the
    pace once every slot is busy, without the start and the tail of a run."""
    ends = sorted(finishes)
    low, high = len(ends) // 10, len(ends) - 1 - len(ends) // 10
    if high - low < 4 or ends[high] <= ends[low]:
        return float("nan")
    return 60 * (high - low) / (ends[high] - ends[low])


def in_flight_before(records: list[dict[str, Any]], until: float) -> int:
    """The most trials in flight at once among those that started before ``until``."""
    spans = [(stamp(r["started_at"]), stamp(r["finished_at"])) for r in records]
    starts = [s for s, _ in spans if s < until]
    return max((sum(1 for s, e in spans if s <= t < e) for t in starts), default=0)


def one_run(
    server: RedisServer, controls: Path, work: Path, name: str, args: list[str], env: dict[str, str]
) -> tuple[list[dict[str, Any]], str]:
    """Serve one run with a fresh worker started with ``args``; its records and its log."""
    worker: Proc = start_worker(server, work / f"{name}.log", *args, name=name, env=env)
    try:
        out = work / f"run-{name}"
        coordinator = start_coordinator(server, controls, out)
        coordinator.process.wait(timeout=1800)
        if coordinator.process.returncode != 0:
            raise SystemExit(f"{name}: the run failed:\n{coordinator.text()[-2000:]}")
        text = worker.text()
    finally:
        worker.stop()
    records = ledger_lines(out)
    errors = [r["error"] for r in records if r["error"]]
    if errors:  # counted in the figures as trials done; said, since they make a run faster
        print(f"pacing: {name}: {len(errors)} infrastructure error(s), e.g. {errors[0][:120]}")
    return records, text


def level_changes(log: str) -> list[tuple[float, int, int, str]]:
    """(when, from, to, why) of each ``pace: level A -> B: why`` line of a worker log."""
    found = []
    for line in log.splitlines():
        match = re.match(r"(\S+ \S+) .*pace: level (\d+) -> (\d+): (.*)", line)
        if match:
            when = datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S,%f").astimezone().timestamp()
            found.append((when, int(match[2]), int(match[3]), match[4]))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max", type=int, default=4)
    parser.add_argument("--tasks", type=int, default=12)
    parser.add_argument("--passes", type=int, default=2)
    smoke.add_flag(parser)
    args = parser.parse_args()
    ceiling, tasks, passes, env = args.max, args.tasks, args.passes, dict(PRODUCTION)
    steps, longer = STEPS, 3  # the auto worker's run: room to ramp up and then settle
    if args.smoke:
        ceiling, tasks, passes, steps, longer = 2, 3, 1, STEPS // 10, 2
        smoke.announce("pacing", "-c 1, -c 2 and -c auto --max 2 on 3 and 6 tasks")
        env |= {"DELTARUN_PACE_HOLD_S": "1", "DELTARUN_PACE_TICK_S": "0.5"}
    print(f"pacing: load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    rates: dict[int, list[float]] = {level: [] for level in range(1, ceiling + 1)}
    with tempfile.TemporaryDirectory(prefix="deltarun-bench-pacing-") as tmp:
        work = Path(tmp)
        server = RedisServer(work / "redis", fsync="everysec")
        server.start()
        try:
            controls = suite(work / "suite", tasks, steps)
            long = suite(work / "long", longer * tasks, steps)
            for n in range(passes):  # up, then down: a load that drifts hits every level
                order = list(rates) if n % 2 == 0 else list(reversed(rates))
                for level in order:
                    name = f"c{level}-{n}"
                    records, _ = one_run(server, controls, work, name, ["-c", str(level)], env)
                    rates[level].append(steady([stamp(r["finished_at"]) for r in records]))
                    print(f"pacing: -c {level}: {len(records)} trials, {rates[level][-1]:.1f}/min")
                if n == 0:  # between the passes
                    auto_args = ["-c", "auto", "--max", str(ceiling)]
                    auto = one_run(server, long, work, "auto", auto_args, env)
        finally:
            server.stop()
    mean = {level: sum(r) / len(r) for level, r in rates.items()}
    best = max(mean, key=lambda level: mean[level])
    print(f"pacing: best fixed: -c {best}, {mean[best]:.1f} trials/min (mean of {passes})")
    for level, found in rates.items():
        spread = f"{min(found):.1f} to {max(found):.1f}"
        print(f"pacing: -c {level}: mean {mean[level]:.1f} trials/min, runs {spread}")
    report(mean, best, *auto)


def report(mean: dict[int, float], best: int, records: list[dict[str, Any]], log: str) -> None:
    rate, first, last = figures(records)
    changes = level_changes(log)
    for when, before, after, why in changes:
        print(f"pacing: auto at {when - first:5.1f} s: {before} -> {after}: {why}")
    settled = changes[-1][2] if changes else 1
    settled_at = changes[-1][0] if changes else first
    there = steady(
        [stamp(r["finished_at"]) for r in records if stamp(r["started_at"]) >= settled_at]
    )
    first_raise = next((when for when, b, a, _ in changes if a > b), last)
    burst = in_flight_before(records, first_raise)
    print(
        f"pacing: auto: {len(records)} trials, {rate:.1f} trials/min in all; settled at level "
        f"{settled} for the last {last - settled_at:.0f} s of the run, {there:.1f} trials/min there"
    )
    print(f"pacing: settled throughput / best fixed = {there / mean[best]:.2f} (goal >= 0.90)")
    print(
        f"pacing: -c {settled} / best fixed = {mean[settled] / mean[best]:.2f} (same level, fixed)"
    )
    print(
        f"pacing: auto run's own throughput / best fixed = {rate / mean[best]:.2f} (ramp included)"
    )
    print(f"pacing: trials in flight before the first raise: at most {burst} (no burst: 1)")


if __name__ == "__main__":
    main()
