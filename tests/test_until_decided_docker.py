"""`deltarun run --until-decided` then `deltarun gate`, on real Docker (issue 40, item 2):
12 tasks in blocks of 4 against a noop control. A candidate that fixes 3 of the 4 tasks of
every block passes superiority at look 2 of 3 (8 of 12 tasks), on the local pool and on a
real Celery worker through Redis; one that breaks 3 of 4 fails non-inferiority at look 2;
each with looks.json, decision.json on the repeated interval, the gate's exit code, and
replay identical. Without the flag a run is unchanged (tests/
test_gate_run.py and the rest)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import run_cli
from tests.helpers import ADD_BREAK, ADD_FIXED, ADD_GOLD, make_suite, repo_task

pytestmark = pytest.mark.docker

TASKS, BLOCK = 12, 4
NOOP = {"type": "scripted", "action": "noop"}


def sequential_run(
    root: Path,
    gate: dict[str, Any],
    patch: str,
    fixed: bool,
    flag: bool = True,
    broker: list[str] | None = None,
) -> tuple[Path, list[list[str]]]:
    """Controls with ``gate`` (and its sequential block); the candidate applies ``patch`` on
    the first 3 tasks of each block and changes nothing on the 4th. ``broker``: the run's
    broker options (its trials then run on the workers), else the local pool."""
    from runner.config.loader import load_controls
    from runner.suite.plan import task_blocks
    from runner.suite.sealing import seal_target

    ids = [f"t{i:02d}" for i in range(TASKS)]
    arms = [
        {"name": "ctrl", "control": True, "agent": NOOP},
        {"name": "cand", "agent": {"type": "patch", "dir": "cand"}},
    ]
    controls = make_suite(
        root,
        [repo_task(i) for i in ids],
        arms,
        fixtures={i: ADD_FIXED for i in ids} if fixed else None,
        seal=False,
    )
    folder = root / "cand"
    folder.mkdir()
    data = yaml.safe_load(controls.read_text())
    controls.write_text(yaml.safe_dump({**data, "gate": gate}, sort_keys=False))
    seal_target(controls, load_controls)
    blocks = task_blocks(load_controls(controls).controls, ids)
    assert blocks is not None and [len(b) for b in blocks] == [BLOCK] * 3
    for block in blocks:
        for k, task_id in enumerate(block):
            (folder / f"{task_id}.diff").write_text(patch if k < 3 else "")
    seal_target(controls, load_controls)  # the patch directory is part of the protocol
    out = root / "run"
    args = ["run", str(controls), "--out", str(out), *(broker or ["-j", "2"])]
    result = run_cli(*args, *(["--until-decided"] if flag else []))
    assert result.returncode == 0, (result.stdout, result.stderr)
    if flag:
        assert "sequential: stopped at look 2 of 3 (every delta criterion decided)" in (
            result.stdout + result.stderr
        )
    return out, blocks


def check_stopped(run: Path, blocks: list[list[str]], decision: str) -> dict[str, Any]:
    """Looks.json says look 2 of 3 decided; the ledger holds exactly the first two blocks."""
    looks = json.loads((run / "looks.json").read_text())
    assert looks["order"] == blocks
    assert [look["tasks"] for look in looks["looks"]] == [4, 8]
    assert [look["targets"][0]["decision"] for look in looks["looks"]] == ["continue", decision]
    assert looks["stop"] == {
        "looks_taken": 2,
        "decided": True,
        "stopped_early": True,
        "tasks_spent": 8,
        "tasks_saved": 4,
        "trials_spent": 16,
        "trials_saved": 8,
    }
    ledger = [json.loads(line) for line in (run / "trials.jsonl").read_text().splitlines()]
    assert {t["task_id"] for t in ledger} == set(blocks[0] + blocks[1]) and len(ledger) == 16
    return looks


def replayed(run: Path) -> None:
    result = run_cli("replay", str(run))
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert "looks.json: identical" in result.stdout
    assert "decision.json: identical" in result.stdout


def test_a_better_candidate_passes_superiority_at_look_2(tmp_path: Path) -> None:
    gate = {
        "superiority": 0.0,
        "sequential": {"spending": "obrien_fleming", "block": BLOCK},
    }
    run, blocks = sequential_run(tmp_path, gate, ADD_GOLD, fixed=False)
    looks = check_stopped(run, blocks, "pass")
    result = run_cli("gate", str(run), "--summary", str(tmp_path / "g.md"))
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert "sequential: stopped at look 2 of 3 (early" in result.stdout
    assert "pass       superiority cand: estimate +0.750, repeated [" in result.stdout
    assert "gate: PASS (exit 0)" in result.stdout
    decision = json.loads((run / "decision.json").read_text())
    sup = next(c for c in decision["criteria"] if c["name"] == "superiority")
    target = looks["looks"][-1]["targets"][0]
    assert sup["ci95"] == target["interval"] and sup["n"] == 8 and sup["ci95"][0] > 0
    assert decision["sequential"]["look"] == 2 and decision["sequential"]["trials_saved"] == 8
    complete = next(c for c in decision["criteria"] if c["row"] == "run complete")
    assert complete["verdict"] == "pass" and "stopped early at look 2 of 3" in complete["detail"]
    assert "stopped at look 2 of 3" in (tmp_path / "g.md").read_text()
    replayed(run)
    # a resumed run takes its looks again from the ledger: nothing more to run
    controls = tmp_path / "controls.yaml"
    again = run_cli("run", str(controls), "--out", str(run), "--resume", "--until-decided")
    assert again.returncode == 0, (again.stdout, again.stderr)
    assert len((run / "trials.jsonl").read_text().splitlines()) == 16
    replayed(run)


def test_a_worse_candidate_fails_non_inferiority_at_look_2(tmp_path: Path) -> None:
    gate = {"non_inferiority": 0.1, "sequential": {"spending": "pocock", "looks": 3}}
    run, blocks = sequential_run(tmp_path, gate, ADD_BREAK, fixed=True)
    check_stopped(run, blocks, "fail")
    result = run_cli("gate", str(run))
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "fail       non_inferiority cand: estimate -0.750, repeated [" in result.stdout
    assert "gate: FAIL (exit 1)" in result.stdout
    assert json.loads((run / "decision.json").read_text())["exit_code"] == 1
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


def test_a_better_candidate_stops_at_look_2_on_celery_workers(
    tmp_path: Path, redis_server: Any
) -> None:
    # The same stop through a broker: the coordinator hands the fleet one block at a time,
    # so the third block is never queued, and the workers ran every trial.
    from tests.distributed_support import start_worker

    gate = {"superiority": 0.0, "sequential": {"spending": "obrien_fleming", "block": BLOCK}}
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
