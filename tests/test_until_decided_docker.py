"""`deltarun run --until-decided` then `deltarun gate` (issue 40, item 2 and its "done
when"). A candidate 30 pp better (3 of the 10 tasks of every block of a 30-task suite
answered right where the control answers wrong) passes superiority at look 2 of 3 (20 of 30
tasks); one 30 pp worse (3 of 10 answered wrong where the control is right) fails
non-inferiority at look 2 of 3; a null arm (answering as the control) spends a 12-task suite
and is not decided (exit 5). Those are answer tasks between recorded arms: graded on the
host, so the looks' arithmetic runs at full size in seconds. Each with looks.json,
decision.json on the repeated interval, the gate's exit code, JUnit and the summary, and
replay identical. On real Docker and a real Celery worker through Redis: repository tasks
(12 in blocks of 4, 3 of 4 fixed by a patch) stop at look 2 of 3. Without the flag a run is
unchanged (tests/test_gate_run.py and the rest)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import pytest
import yaml

from tests.conftest import run_cli
from tests.helpers import ADD_FIXED, ADD_GOLD, make_suite, repo_task

pytestmark = pytest.mark.docker

NOOP = {"type": "scripted", "action": "noop"}


def answer_task(task_id: str) -> dict[str, Any]:
    """An answer task: graded on the host by its metric, no sandbox for a recorded answer."""
    return {"id": task_id, "kind": "ordinary", "prompt": "What is 1 + 1?", "expect": 2,
            "metrics": ["exact_match"], "deadline_s": 30}  # fmt: skip


def sequential_run(
    root: Path,
    gate: dict[str, Any],
    patch: str | None,
    fixed: bool,
    shape: tuple[int, int, int] = (12, 4, 3),
    stop: str | None = "sequential: stopped at look 2 of 3 (every delta criterion decided)",
    broker: list[str] | None = None,
) -> tuple[Path, list[list[str]]]:
    """Controls with ``gate`` (and its sequential block) over ``shape`` = (tasks, block size,
    tasks changed per block). With a ``patch``, repository tasks against a noop control (the
    fixture ``fixed`` or not): the candidate applies ``patch`` on the first ``changed`` tasks
    of each block and changes nothing on the rest. Without one, answer tasks between two
    recorded arms: the control answers every task right (``fixed``) or wrong, the candidate
    the other way on the first ``changed`` tasks of each block and as the control elsewhere.
    ``stop``: the line the run prints about its stop. ``broker``: the run's broker options
    (its trials then run on the workers), else the local pool."""
    from runner.config.loader import load_controls
    from runner.suite.plan import task_blocks
    from runner.suite.sealing import seal_target

    tasks, size, changed = shape
    ids = [f"t{i:02d}" for i in range(tasks)]
    cand = {"name": "cand", "agent": {"type": "patch", "dir": "cand"}}
    if patch is not None:
        ctrl = {"name": "ctrl", "control": True, "agent": NOOP}
        lines = [repo_task(i) for i in ids]
        fixtures = {i: ADD_FIXED for i in ids} if fixed else None
    else:
        ctrl = {"name": "ctrl", "control": True, "agent": {"type": "patch", "dir": "ctrl"}}
        lines, fixtures = [answer_task(i) for i in ids], None
    controls = make_suite(root, lines, [ctrl, cand], fixtures=fixtures, seal=False)
    folders = {name: root / name for name in ("cand", "ctrl")}
    for folder in folders.values():
        folder.mkdir()
    data = yaml.safe_load(controls.read_text())
    controls.write_text(yaml.safe_dump({**data, "gate": gate}, sort_keys=False))
    seal_target(controls, load_controls)
    blocks = task_blocks(load_controls(controls).controls, ids)
    assert blocks is not None and [len(b) for b in blocks] == [size] * (tasks // size)
    right, wrong = ("2", "3") if fixed else ("3", "2")  # the control's answer, and the other
    for block in blocks:
        for k, task_id in enumerate(block):
            if patch is not None:
                (folders["cand"] / f"{task_id}.diff").write_text(patch if k < changed else "")
                continue
            (folders["ctrl"] / f"{task_id}.answer.json").write_text(right)
            (folders["cand"] / f"{task_id}.answer.json").write_text(wrong if k < changed else right)
    seal_target(controls, load_controls)  # the recorded arms' directories are in the protocol
    out = root / "run"
    args = ["run", str(controls), "--out", str(out), *(broker or ["-j", "2"])]
    result = run_cli(*args, "--until-decided")
    assert result.returncode == 0, (result.stdout, result.stderr)
    if stop is not None:
        assert stop in result.stdout + result.stderr
    return out, blocks


def check_stopped(run: Path, blocks: list[list[str]], decision: str) -> dict[str, Any]:
    """Looks.json says look 2 of 3 decided; the ledger holds exactly the first two blocks."""
    size = len(blocks[0])
    looks = json.loads((run / "looks.json").read_text())
    assert looks["order"] == blocks
    assert [look["tasks"] for look in looks["looks"]] == [size, 2 * size]
    assert [look["targets"][0]["decision"] for look in looks["looks"]] == ["continue", decision]
    assert looks["stop"] == {
        "looks_taken": 2,
        "decided": True,
        "stopped_early": True,
        "tasks_spent": 2 * size,
        "tasks_saved": size,
        "trials_spent": 4 * size,
        "trials_saved": 2 * size,
    }
    ledger = [json.loads(line) for line in (run / "trials.jsonl").read_text().splitlines()]
    assert {t["task_id"] for t in ledger} == set(blocks[0] + blocks[1])
    assert len(ledger) == 4 * size
    return looks


def gated(run: Path, root: Path, code: int, verdict: str) -> dict[str, Any]:
    """``deltarun gate`` with JUnit and the summary: its exit code and line, each file."""
    xml, summary = root / "gate.xml", root / "gate.md"
    result = run_cli("gate", str(run), "--junit", str(xml), "--summary", str(summary))
    assert result.returncode == code, (result.stdout, result.stderr)
    assert f"gate: {verdict} (exit {code})" in result.stdout
    decision = json.loads((run / "decision.json").read_text())
    assert decision["exit_code"] == code
    suite = ET.parse(xml).getroot().find("testsuite[@name='cand']")
    assert suite is not None
    assert f"exit {code}" in summary.read_text() or verdict.lower() in summary.read_text().lower()
    return decision


def replayed(run: Path) -> None:
    result = run_cli("replay", str(run))
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert "looks.json: identical" in result.stdout
    assert "decision.json: identical" in result.stdout


def test_a_candidate_30_points_better_passes_superiority_at_look_2(tmp_path: Path) -> None:
    gate = {"superiority": 0.0, "sequential": {"spending": "obrien_fleming", "block": 10}}
    run, blocks = sequential_run(tmp_path, gate, None, fixed=False, shape=(30, 10, 3))
    looks = check_stopped(run, blocks, "pass")
    decision = gated(run, tmp_path, 0, "PASS")
    result = run_cli("gate", str(run))
    assert "sequential: stopped at look 2 of 3 (early" in result.stdout
    assert "pass       superiority cand: estimate +0.300, repeated [" in result.stdout
    sup = next(c for c in decision["criteria"] if c["name"] == "superiority")
    target = looks["looks"][-1]["targets"][0]
    assert sup["ci95"] == target["interval"] and sup["n"] == 20 and sup["ci95"][0] > 0
    assert decision["sequential"]["look"] == 2 and decision["sequential"]["trials_saved"] == 20
    complete = next(c for c in decision["criteria"] if c["row"] == "run complete")
    assert complete["verdict"] == "pass" and "stopped early at look 2 of 3" in complete["detail"]
    assert "stopped at look 2 of 3" in (tmp_path / "gate.md").read_text()
    replayed(run)
    # a resumed run takes its looks again from the ledger: nothing more to run
    controls = tmp_path / "controls.yaml"
    again = run_cli("run", str(controls), "--out", str(run), "--resume", "--until-decided")
    assert again.returncode == 0, (again.stdout, again.stderr)
    assert len((run / "trials.jsonl").read_text().splitlines()) == 40
    replayed(run)


def test_a_candidate_30_points_worse_fails_non_inferiority_at_look_2(tmp_path: Path) -> None:
    gate = {"non_inferiority": 0.02, "sequential": {"spending": "pocock", "looks": 3}}
    run, blocks = sequential_run(tmp_path, gate, None, fixed=True, shape=(30, 10, 3))
    check_stopped(run, blocks, "fail")
    gated(run, tmp_path, 1, "FAIL")
    result = run_cli("gate", str(run))
    assert "fail       non_inferiority cand: estimate -0.300, repeated [" in result.stdout
    case = (
        ET.parse(tmp_path / "gate.xml")
        .getroot()
        .find("testsuite[@name='cand']/testcase[@name='non_inferiority']")
    )
    assert case is not None and case.find("failure") is not None
    replayed(run)
    looks = run / "looks.json"
    kept = looks.read_text()
    looks.write_text(kept.replace('"stopped_early": true', '"stopped_early": false'))
    for command in ("replay", "gate"):
        tampered = run_cli(command, str(run))
        assert tampered.returncode == 3, (tampered.stdout, tampered.stderr)
        assert "looks.json: the looks rebuilt from the ledger differ" in tampered.stderr
    looks.write_text(kept)
    replayed(run)


def test_a_null_arm_spends_the_suite_and_is_not_decided(tmp_path: Path) -> None:
    # The candidate changes nothing: every difference is 0, and 12 agreeing tasks are too few
    # to bound the delta within 2 points either way; the run spends the suite.
    gate = {"non_inferiority": 0.02, "sequential": {"spending": "obrien_fleming", "block": 4}}
    run, _ = sequential_run(
        tmp_path, gate, None, fixed=False, shape=(12, 4, 0),
        stop="sequential: stopped at look 3 of 3 (the suite spent)",
    )  # fmt: skip
    looks = json.loads((run / "looks.json").read_text())
    assert [look["targets"][0]["decision"] for look in looks["looks"]] == [
        "continue", "continue", "undecided",
    ]  # fmt: skip
    assert looks["looks"][-1]["targets"][0]["method"] == "exact-agreeing"
    assert looks["stop"]["tasks_spent"] == 12 and not looks["stop"]["stopped_early"]
    decision = gated(run, tmp_path, 5, "NOT DECIDED")
    noninf = next(c for c in decision["criteria"] if c["name"] == "non_inferiority")
    assert noninf["verdict"] == "undecided" and noninf["estimate"] == 0.0
    replayed(run)


def test_a_better_candidate_stops_at_look_2_on_celery_workers(
    tmp_path: Path, redis_server: Any
) -> None:
    # The same stop through a broker: the coordinator hands the fleet one block at a time,
    # so the third block is never queued, and the workers ran every trial.
    from tests.distributed_support import start_worker

    gate = {"superiority": 0.0, "sequential": {"spending": "obrien_fleming", "block": 4}}
    worker = start_worker(redis_server, tmp_path / "worker.log", "-c", "2")
    try:
        run, blocks = sequential_run(
            tmp_path, gate, ADD_GOLD, fixed=False, broker=["--broker", redis_server.url]
        )
    finally:
        worker.stop()
    check_stopped(run, blocks, "pass")
    ledger = [json.loads(line) for line in (run / "trials.jsonl").read_text().splitlines()]
    assert {t["worker"] for t in ledger} == {"w1"}
    result = run_cli("gate", str(run))
    assert result.returncode == 0, (result.stdout, result.stderr)
    replayed(run)


def test_until_decided_is_refused_without_a_sequential_block(tmp_path: Path) -> None:
    controls = make_suite(tmp_path, [repo_task("t0")], [{"name": "c", "control": True,
                          "agent": NOOP}])  # fmt: skip
    for broker in ([], ["--broker", "redis://127.0.0.1:6379/15"]):
        args = ["run", str(controls), "--out", str(tmp_path / "r"), "--until-decided", *broker]
        result = run_cli(*args)
        assert result.returncode == 2, (result.stdout, result.stderr)
        assert "--until-decided needs a gate: section" in result.stderr
        assert result.stderr.strip().count("\n") == 0
        assert not (tmp_path / "r").exists()
