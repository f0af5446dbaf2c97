"""Trial overhead: deltarun trials per second against raw `docker run --rm`, same image, same -j.

A trivial task (a scripted noop agent, `true` as the hidden test) still costs
two fresh sandboxes (agent and verify), so the floor is half the raw rate.
Both rates are measured in this run, on this machine; the printed ratio is
trials/s divided by that floor (1.0 = as fast as two bare `docker run`s).

With gVisor registered (``make gvisor``), the same trials again under
``runtime.oci_runtime: runsc``, and their rate against runc's from this run: what
a user pays for a kernel of its own per sandbox.

    python bench/overhead.py [--tasks 20] [-j 2] [--smoke]

``--smoke`` (``bench/smoke.py``): one trial against two raw runs.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import smoke  # noqa: E402
from runner.cli import main as _unused_main  # noqa: E402,F401  (imports the package as installed)
from runner.executors.local import run_local  # noqa: E402
from runner.run.prepare import prepare  # noqa: E402
from runner.sandbox.docker import DockerSandboxFactory  # noqa: E402
from runner.sandbox.engine import connect, engine_runtimes, image_id  # noqa: E402
from runner.trees.inputs import LocalInputs  # noqa: E402
from runner.trial.env import trial_env  # noqa: E402
from runner.trial.execute import execute_trial  # noqa: E402
from tests.helpers import PY_IMAGE, make_suite, repo_task  # noqa: E402


def raw_rate(runs: int, parallel: int) -> float:
    def one(_: int) -> None:
        subprocess.run(
            ["docker", "run", "--rm", "--network", "none", PY_IMAGE, "true"],
            check=True,
            capture_output=True,
        )

    one(0)  # warm-up
    start = time.perf_counter()
    with ThreadPoolExecutor(parallel) as pool:
        list(pool.map(one, range(runs)))
    return runs / (time.perf_counter() - start)


def trial_rate(tasks: int, parallel: int, runtime: str | None = None) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        suite_tasks = [
            {**repo_task(f"t{i}", exit_status=True), "hidden_test": "true"} for i in range(tasks)
        ]
        controls = make_suite(
            root,
            suite_tasks,
            [
                {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
            ],
            runtime={"oci_runtime": runtime} if runtime else None,
        )
        client = connect()
        prepared = prepare(
            controls, root / "run", resume=False, image_digest=lambda image: image_id(client, image)
        )
        factory = DockerSandboxFactory(client)
        # The environment every executor runs trials in (``trial_env``): fixtures staged once
        # per machine, copy-free views where the engine allows them, as a run has them.
        env = trial_env(prepared.loaded.controls, LocalInputs(prepared.suite), factory, "bench")
        records: list[object] = []

        def run_one(job):  # type: ignore[no-untyped-def]
            return execute_trial(job, prepared.tasks[job.task_id], prepared.agents[job.arm], env)

        run_one(prepared.todo[0])  # warm-up, not counted
        start = time.perf_counter()
        run_local(
            prepared.todo, run_one, records.append, parallel=parallel, on_interrupt=factory.kill_all
        )
        elapsed = time.perf_counter() - start
        failed = [r for r in records if getattr(r, "error", None)]
        if failed:
            raise SystemExit(f"bench trials failed: {failed[0]}")
        return len(records) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("-j", "--parallel", type=int, default=2)
    smoke.add_flag(parser)
    args = parser.parse_args()
    if args.smoke:
        args.tasks = 1
        smoke.announce("overhead", "1 trial, 2 raw runs")
    raw = raw_rate(2 * args.tasks, args.parallel)
    trials = trial_rate(args.tasks, args.parallel)
    floor = raw / 2
    print(f"overhead: raw docker run --rm: {raw:.2f} runs/s at -j {args.parallel}")
    print(
        f"overhead: deltarun trials:     {trials:.2f} trials/s at -j {args.parallel} "
        f"({args.tasks} trials, 2 sandboxes each)"
    )
    print(f"overhead: floor (raw/2):       {floor:.2f} trials/s")
    print(f"overhead: ratio trials/floor:  {trials / floor:.2f}  (goal >= 0.90)")
    if "runsc" not in engine_runtimes(connect()):
        print("overhead: gVisor: runsc is not registered (make gvisor): not measured")
        return
    gvisor = trial_rate(args.tasks, args.parallel, "runsc")
    print(
        f"overhead: deltarun trials under gVisor (runsc): {gvisor:.2f} trials/s at "
        f"-j {args.parallel}; ratio gVisor/runc {gvisor / trials:.2f}"
    )


if __name__ == "__main__":
    main()
