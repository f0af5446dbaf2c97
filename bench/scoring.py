"""Scoring and rendering: seconds and peak memory to report 100,000 trial records.

A seeded ``random.Random`` generates synthetic Trial records (10 arms, one of
them the control; 10,000 tasks, ~10% of them negative controls, in three size
buckets; one repeat) with a realistic mix of outcomes (passes, misses, ~5%
timeouts, ~1.5% infrastructure errors, abstentions, tool violations), tokens,
wall times, a ~0.7 KB patch and short log tails (~1.6 KB a line in all; a real
agent's records, with longer logs, are bigger; ``--lean`` leaves them out). They
are written with ``RunDir.write_records`` to ``trials.jsonl`` in a temp dir, by a
separate process; writing is not timed.

Measured in a fresh Python subprocess (imports done before any clock starts),
on this machine, in this run:

- parse: ``RunDir(path).scored_trials()``, the path ``report`` and ``replay`` take
  (pydantic validation of every line, first record of each job id);
- score+render: ``score`` + ``report.model.build`` + ``to_json`` + ``dumps_json``
  + ``render_markdown``,
  called as ``runner.report.assemble.build_report`` calls them (covariates on the size
  buckets; no checklist rows or baseline legs, whose cost does not grow with the
  records; the bootstrap off, its default: ``--bootstrap N`` turns it on).
  ``render_html`` is timed after that, on its own line, outside the goal;
- baseline, in another fresh subprocess: ``json.loads`` of every line of the same
  file, the floor of any parser; the ratio printed is parse time / that floor.

Peak memory is the measured process's ``resource.getrusage(RUSAGE_SELF).ru_maxrss``
(its high-water RSS, interpreter and imports included: what ``deltarun report``
itself would need) taken after score+render; the part added by the work (the
``ru_maxrss`` delta from just after the imports) is printed too. No tracemalloc:
it would slow the timed code several-fold. The machine may be shared: CPU seconds
of the measured process are printed next to the wall-clock ones, and ``--runs N``
keeps the fastest of N fresh processes. Goal: total under 5 s, peak under 500 MB.

    python bench/scoring.py [--records 100000] [--arms 10] [--tasks N] [--lean]
                            [--bootstrap 0] [--runs 1] [--seed 0] [--digests] [--smoke]

``--smoke`` (``bench/smoke.py``): 20 records (10 arms, 2 tasks), one run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import smoke  # noqa: E402
from runner.records import Outcome, TaskKind, Trial  # noqa: E402
from runner.store.rundir import RunDir  # noqa: E402
from runner.suite.plan import job_id  # noqa: E402

GOAL_S = 5.0
GOAL_MB = 500.0
MB = 1024 * 1024  # printed "MB" are MiB, as in bench/dispatch.py
PROTOCOL = hashlib.sha256(b"bench-scoring").hexdigest()
RUN_ID = "bench-scoring-20250101T000000Z-000000"
CONTROL = "control"
META = "bench.json"  # arms and tasks, as run.json would hold them


# --------------------------------------------------------------------------- synthetic records


def _patch(rng: random.Random, task_id: str) -> str:
    hunks = []
    for h in range(rng.randint(1, 4)):
        body = "".join(
            f"{rng.choice('+- ')}    value_{rng.randrange(10_000)} = compute({h}, {i})\n"
            for i in range(rng.randint(3, 12))
        )
        hunks.append(f"@@ -{10 * h + 1},7 +{10 * h + 1},8 @@\n{body}")
    return f"--- a/src/{task_id}.py\n+++ b/src/{task_id}.py\n" + "".join(hunks)


def synthetic_run(
    records: int, arms: int, tasks: int, seed: int, lean: bool
) -> tuple[list[Trial], list[str], list[dict[str, str]]]:
    """``records`` records in plan order (tasks shuffled, arms interleaved), arms, tasks."""
    rng = random.Random(seed)
    arm_names = [CONTROL] + [f"arm-{i:02d}" for i in range(1, arms)]
    skill = {arm: 0.35 + 0.3 * rng.random() for arm in arm_names}
    task_meta = [
        {
            "id": f"task-{i:05d}",
            "kind": "negative" if rng.random() < 0.10 else "ordinary",
            "size_bucket": rng.choice("sml"),
        }
        for i in range(tasks)
    ]
    difficulty = {t["id"]: rng.uniform(-0.3, 0.3) for t in task_meta}
    order = task_meta[:]
    rng.shuffle(order)
    trials: list[Trial] = []
    repeat = 0
    while len(trials) < records:
        for task in order:
            for arm in arm_names:
                if len(trials) < records:
                    trials.append(
                        _trial(
                            rng,
                            task["id"],
                            arm,
                            repeat,
                            TaskKind(task["kind"]),
                            skill[arm] - difficulty[task["id"]],
                            lean,
                        )
                    )
        repeat += 1
    return trials, arm_names, task_meta


def _trial(
    rng: random.Random,
    task_id: str,
    arm: str,
    repeat: int,
    kind: TaskKind,
    p_pass: float,
    lean: bool,
) -> Trial:
    roll = rng.random()
    error = None
    if roll < 0.015:
        outcome, error = Outcome.ERROR, "sandbox: the Docker engine did not answer within 30 s"
    elif roll < 0.065:
        outcome = Outcome.TIMEOUT
    elif kind is TaskKind.NEGATIVE:
        outcome = Outcome.ABSTAIN_OK if rng.random() < 0.75 else Outcome.INVALID_COMPLETION
    elif rng.random() < 0.02:
        outcome = Outcome.FALSE_ABSTAIN
    else:
        outcome = Outcome.SUCCESS if rng.random() < p_pass else Outcome.MISS
    ran = outcome is not Outcome.ERROR
    ordinary = kind is TaskKind.ORDINARY
    patch = verify_log = agent_log = ""
    verify_exit = None
    if ran and ordinary and outcome is not Outcome.TIMEOUT:
        verify_exit = 0 if outcome is Outcome.SUCCESS else 1
    if not lean and ran:
        if ordinary and rng.random() < 0.9:
            patch = _patch(rng, task_id)
        if verify_exit is not None:
            verify_log = f"collected {rng.randint(1, 40)} items\n" + (
                "all passed\n" if verify_exit == 0 else "FAILED tests/test_hidden.py::test_case\n"
            )
        agent_log = f"step {rng.randint(1, 60)}: tool call done\n" * rng.randint(1, 8)
    wall = 600.0 if outcome is Outcome.TIMEOUT else rng.lognormvariate(4.0, 0.8)
    return Trial(
        run_id=RUN_ID,
        job_id=job_id(PROTOCOL, task_id, arm, repeat),
        protocol_sha256=PROTOCOL,
        task_id=task_id,
        arm=arm,
        repeat=repeat,
        task_kind=kind,
        outcome=outcome,
        passed=outcome is Outcome.SUCCESS,
        timeout=outcome is Outcome.TIMEOUT,
        tool_violation=ran and rng.random() < 0.01,
        abstained=outcome in (Outcome.ABSTAIN_OK, Outcome.FALSE_ABSTAIN),
        prompt_tokens=rng.randint(2_000, 60_000) if ran else 0,
        completion_tokens=rng.randint(200, 8_000) if ran else 0,
        wall_s=round(wall, 3),
        retries_used=0,
        tool_calls=rng.randint(0, 40) if ran else 0,
        patch=patch,
        patch_sha256=hashlib.sha256(patch.encode()).hexdigest() if patch else "",
        verify_exit_code=verify_exit,
        verify_log=verify_log,
        agent_exit_code=0 if ran and outcome is not Outcome.TIMEOUT else None,
        agent_log=agent_log,
        error=error,
        worker=f"worker-{rng.randrange(8)}",
        image_digest="sha256:" + PROTOCOL,
        started_at="2025-01-01T00:00:00+00:00",
        finished_at="2025-01-01T00:01:00+00:00",
    )


# --------------------------------------------------------------------------- child processes


def _maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / MB  # KiB on Linux


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def child_generate(
    run_path: Path, records: int, arms: int, tasks: int, seed: int, lean: int
) -> None:
    """Write the ledger in a process of its own: no measured process inherits its RSS."""
    trials, arm_names, task_meta = synthetic_run(records, arms, tasks, seed, bool(lean))
    RunDir(run_path).write_records(trials, [])
    meta = {"arms": arm_names, "tasks": task_meta}
    (run_path / META).write_text(json.dumps(meta), encoding="utf-8")


def child_report(run_path: Path, bootstrap: int) -> dict[str, Any]:
    """Parse the ledger, score and render as ``build_report`` does: seconds and memory."""
    from runner.evidence.scoring import score
    from runner.report.contents import Pins, build
    from runner.report.html import render_html
    from runner.report.jsonform import dumps_json, to_json
    from runner.report.markdown import render_markdown

    meta = json.loads((run_path / META).read_text(encoding="utf-8"))
    task_ids = [t["id"] for t in meta["tasks"]]
    pins = Pins(
        protocol_id="bench-scoring",
        protocol_sha256=PROTOCOL,
        suite_sha256="0" * 64,
        channel="scored",
        run_id=RUN_ID,
        control_arm=CONTROL,
        image_digests={"python:3.11-slim": "sha256:" + PROTOCOL},
        agent_dir_digests={},
        ledger_sha256="0" * 64,
        deltarun_version="bench",
        python_version=sys.version.split()[0],
    )
    import_mb = _maxrss_mb()
    cpu0, t0 = _cpu_s(), time.perf_counter()
    trials = RunDir(run_path).scored_trials()
    t1 = time.perf_counter()
    parse_mb = _maxrss_mb()
    scores = score(trials, meta["arms"], CONTROL, task_ids)
    report = build(scores, pins, trials, bootstrap=(bootstrap, 0), tasks=meta["tasks"])
    data = to_json(report)
    json_text = dumps_json(data)
    markdown = render_markdown(report)
    cpu2, t2 = _cpu_s(), time.perf_counter()
    peak_mb = _maxrss_mb()
    html = render_html(data)
    t3 = time.perf_counter()
    texts = {"report.json": json_text, "report.md": markdown, "report.html": html}
    return {
        "records": len(trials),
        "parse_s": t1 - t0,
        "render_s": t2 - t1,
        "cpu_s": cpu2 - cpu0,
        "html_s": t3 - t2,
        "import_mb": import_mb,
        "parse_mb": parse_mb,
        "peak_mb": peak_mb,
        "html_peak_mb": _maxrss_mb(),
        "sizes_mb": {name: len(text.encode()) / MB for name, text in texts.items()},
        "sha256": {name: hashlib.sha256(text.encode()).hexdigest() for name, text in texts.items()},
    }


def child_baseline(run_path: Path) -> dict[str, Any]:
    """``json.loads`` of every ledger line: the floor of any parser of the same file."""
    start = time.perf_counter()
    with RunDir(run_path).ledger_path.open(encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle]
    return {"records": len(rows), "loads_s": time.perf_counter() - start}


def run_child(*args: object) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", *map(str, args)],
        stdout=subprocess.PIPE,  # its stderr is ours: a failure shows its traceback
        text=True,
        check=True,
        cwd=ROOT,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def child_main(args: list[str]) -> None:
    mode, path = args[0], Path(args[1])
    numbers = [int(a) for a in args[2:]]
    if mode == "generate":
        child_generate(path, *numbers)
        print("{}")
    elif mode == "report":
        print(json.dumps(child_report(path, *numbers)))
    else:
        print(json.dumps(child_baseline(path)))


# --------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--arms", type=int, default=10, help="including the control")
    parser.add_argument("--tasks", type=int, default=None, help="default: records / arms")
    parser.add_argument("--lean", action="store_true", help="records without patches or logs")
    parser.add_argument("--bootstrap", type=int, default=0, help="bootstrap resamples per delta")
    parser.add_argument("--runs", type=int, default=1, help="keep the fastest of N processes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--digests", action="store_true", help="print each report's sha256")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    smoke.add_flag(parser)
    args = parser.parse_args()
    if args.child:
        child_main(args.child)
        return
    if args.smoke:
        args.records, args.arms, args.tasks, args.runs = 20, 10, None, 1
        smoke.announce("scoring", "20 records, 10 arms, 2 tasks, one run")

    tasks = args.tasks or max(1, args.records // args.arms)
    with tempfile.TemporaryDirectory() as tmp:
        run_path = Path(tmp)
        run_child("generate", run_path, args.records, args.arms, tasks, args.seed, int(args.lean))
        file_mb = RunDir(run_path).ledger_path.stat().st_size / MB
        base = run_child("baseline", run_path)
        runs = [run_child("report", run_path, args.bootstrap) for _ in range(max(1, args.runs))]
    rep = min(runs, key=lambda r: r["parse_s"] + r["render_s"])
    total = rep["parse_s"] + rep["render_s"]
    peak = rep["peak_mb"]
    print(
        f"scoring: {rep['records']:,} records, {args.arms} arms, {tasks:,} tasks: "
        f"parse {rep['parse_s']:.1f} s, score+render {rep['render_s']:.1f} s, "
        f"total {total:.1f} s (goal < {GOAL_S:.0f} s); peak memory {peak:.0f} MB "
        f"(goal < {GOAL_MB:.0f} MB)"
    )
    print(
        f"scoring: baseline json.loads of every line of the {file_mb:.0f} MB trials.jsonl "
        f"({'lean' if args.lean else 'with patches and logs'}): {base['loads_s']:.2f} s; "
        f"parse / json.loads {rep['parse_s'] / base['loads_s']:.2f}x"
    )
    print(
        f"scoring: memory (ru_maxrss of a fresh process): {rep['import_mb']:.0f} MB after "
        f"imports, {rep['parse_mb']:.0f} MB after parse, {peak:.0f} MB after score+render "
        f"(+{peak - rep['import_mb']:.0f} MB for the work); CPU {rep['cpu_s']:.1f} s"
        + (f"; fastest of {len(runs)} runs" if len(runs) > 1 else "")
    )
    sizes = rep["sizes_mb"]
    print(
        f"scoring: outside the goal: render_html {rep['html_s']:.1f} s, peak "
        f"{rep['html_peak_mb']:.0f} MB after it; report.json {sizes['report.json']:.1f} MB, "
        f"report.md {sizes['report.md']:.1f} MB, report.html {sizes['report.html']:.1f} MB"
    )
    if args.digests:
        for name, digest in rep["sha256"].items():
            print(f"scoring: {name} sha256 {digest}")
    met = total < GOAL_S and peak < GOAL_MB
    print(f"scoring: goal {'met' if met else 'MISSED'}")


if __name__ == "__main__":
    main()
