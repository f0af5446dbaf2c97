"""`deltarun run / report / replay` end to end through the real command and Docker."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import leftover_sandboxes, made_once, run_cli
from tests.helpers import ADD_GOLD, make_suite, repo_task, write_agent

pytestmark = pytest.mark.docker

ARMS = [
    {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
    {"name": "gold", "agent": {"type": "patch", "dir": "gold"}},
]


def gold_suite(root: Path, n: int = 2, **kwargs: Any) -> Path:
    (root / "gold").mkdir(exist_ok=True)
    for i in range(n):
        (root / "gold" / f"t{i}.diff").write_text(ADD_GOLD)
    return make_suite(root, [repo_task(f"t{i}") for i in range(n)], ARMS, **kwargs)


def ledger(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "trials.jsonl").read_text().splitlines()]


def _make_gold_run(root: Path) -> None:
    """The gold suite's run (two tasks, control and gold), and what it printed."""
    from runner.config.loader import load_controls

    controls = gold_suite(root)
    registered = load_controls(controls).protocol_sha256
    result = run_cli(
        "run", str(controls), "--out", str(root / "run"), "-j", "2", "--expect-protocol", registered
    )
    assert result.returncode == 0, result.stderr
    (root / "stdout.txt").write_text(result.stdout)


@pytest.fixture
def gold_run(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, docker_api: Any) -> Path:
    """A copy, in this test's directory, of the gold suite and its run: run once per session
    (``made_once``) for the tests that read, resume, replay or re-verify a finished run.
    The copy's run.json names the original's controls, which no test changes."""
    made = made_once(tmp_path_factory, "run-cli-gold-run", _make_gold_run)
    shutil.copytree(made, tmp_path, dirs_exist_ok=True)
    return tmp_path


def test_run_report_replay(gold_run: Path) -> None:
    out = gold_run / "run"
    stdout = (gold_run / "stdout.txt").read_text()  # what the run printed
    # No negative controls (an integrity row), the exploratory channel and a two-task pack
    # (publication rows): one integrity row fails, so the headline is shown, with the
    # refusal slice marked as not measured, and the verdict is demo.
    assert "gold vs ctrl: +100.0 pp pass rate (95% CI" in stdout
    assert "refusal slice: not measured" in stdout
    assert "verdict: demo (failing: refusal slice present; channel scored; pack size)" in stdout
    records = ledger(out)
    assert len(records) == 4 and len({r["job_id"] for r in records}) == 4
    assert {(r["arm"], r["outcome"]) for r in records} == {("ctrl", "miss"), ("gold", "success")}
    report = json.loads((out / "report.json").read_text())
    assert report["deltas"][0]["aggregate_delta"]["mean"] == 1.0
    assert report["verdict"] == "demo" and report["headline_withheld"] is False
    failing = {row["item"] for row in report["checklist"] if not row["ok"]}
    assert failing == {"refusal slice present", "channel scored", "pack size"}
    assert report["deltas"][0]["aggregate_delta"]["ci_method"] == "newcombe-paired"
    assert report["deltas"][0]["refusal_delta"] is None
    assert report["pins"]["suite_sha256"] == report["deltas"][0]["suite_id"]
    before = (out / "report.md").read_bytes()
    replayed = run_cli("replay", str(out))
    assert replayed.returncode == 0, replayed.stderr
    assert (out / "report.md").read_bytes() == before
    # One edited record makes the replay fail with exit 3.
    lines = (out / "trials.jsonl").read_text().splitlines()
    edited = json.loads(lines[0])
    edited["passed"] = not edited["passed"]
    lines[0] = json.dumps(edited)
    (out / "trials.jsonl").write_text("\n".join(lines) + "\n")
    tampered = run_cli("replay", str(out))
    assert tampered.returncode == 3
    assert "Traceback" not in tampered.stderr and "--accept-edits" in tampered.stderr
    accepted = run_cli("replay", str(out), "--accept-edits")
    assert accepted.returncode == 0, accepted.stderr
    stamped = (out / "report.md").read_text()
    assert "edited after the run" in stamped
    report = json.loads((out / "report.json").read_text())
    assert report["edited"]["reported_ledger_sha256"] != report["edited"]["ledger_sha256"]
    assert not next(r for r in report["checklist"] if r["item"].startswith("replay"))["ok"]
    again = run_cli("replay", str(out))  # the accepted state replays identically
    assert again.returncode == 0, again.stderr
    assert (out / "report.md").read_text() == stamped


def test_tampered_fixture_stops_before_any_container(tmp_path: Path, docker_api: Any) -> None:
    controls = gold_suite(tmp_path)
    fixture = tmp_path / "suite" / "fixtures" / "t1.tar"
    data = bytearray(fixture.read_bytes())
    data[600] ^= 0x01  # one changed byte inside the first member's content
    fixture.write_bytes(bytes(data))
    since = f"{time.time():.6f}"  # sub-second: earlier tests' containers are not counted
    result = run_cli("run", str(controls), "--out", str(tmp_path / "run"))
    assert result.returncode == 3, result.stderr
    assert "t1.tar" in result.stderr and "digest mismatch" in result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    events = docker_api.events(
        since=since,
        until=int(time.time()) + 1,
        decode=True,
        filters={"type": "container", "event": "create"},
    )
    owner = "deltarun.pid"  # this run's sandboxes, not those of a test running beside it
    assert [
        e for e in events if e.get("Actor", {}).get("Attributes", {}).get(owner) == result.owner
    ] == []
    assert not (tmp_path / "run" / "trials.jsonl").exists()


def test_interrupted_run_resumes_each_job_once(tmp_path: Path, docker_api: Any) -> None:
    slow = write_agent(tmp_path, "slow", "sleep 2\n")
    (tmp_path / "gold").mkdir()
    tasks = [repo_task(f"t{i}") for i in range(4)]
    for i in range(4):
        (tmp_path / "gold" / f"t{i}.diff").write_text(ADD_GOLD)
    controls = make_suite(tmp_path, tasks, [*ARMS, {"name": "slow", "agent": slow}])
    out = tmp_path / "run"
    exe = Path(__file__).resolve().parents[1] / ".venv" / "bin" / "deltarun"
    # As from a terminal: Ctrl-C reaches it even when this test runs where SIGINT is ignored
    # (a background job of a script: an ignored signal stays ignored across exec, and Python
    # then leaves it so).
    with_sigint = "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    with_sigint += "os.execv(sys.argv[1], sys.argv[1:])"
    argv = [str(exe), "run", str(controls), "--out", str(out), "-j", "2"]
    proc = subprocess.Popen(
        [sys.executable, "-c", with_sigint, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 120
    while time.time() < deadline:
        path = out / "trials.jsonl"
        if path.exists() and len(path.read_text().splitlines()) >= 3:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    first = ledger(out)
    assert 3 <= len(first) < 12
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    assert leftover_sandboxes(docker_api, run=run_id) == ([], [])
    resumed = run_cli("run", str(controls), "--out", str(out), "--resume", "-j", "2")
    assert resumed.returncode == 0, resumed.stderr
    records = ledger(out)
    assert len(records) == 12
    assert len({r["job_id"] for r in records}) == 12
    assert records[: len(first)] == first  # nothing already recorded was lost or rewritten
    # A resume under changed controls is refused with exit 3.
    (tmp_path / "gold" / "t0.diff").write_text(ADD_GOLD + "\n")
    refused = run_cli("run", str(controls), "--out", str(out), "--resume")
    assert refused.returncode == 3 and "protocol" in refused.stderr


def test_report_without_control_records_exits_4(gold_run: Path) -> None:
    out = gold_run / "run"
    kept = [r for r in ledger(out) if r["arm"] != "ctrl"]
    (out / "trials.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    result = run_cli("report", str(out))
    assert result.returncode == 4
    assert "control" in result.stderr and "pp" not in result.stdout and "%" not in result.stdout


def test_existing_run_dir_needs_resume(gold_run: Path) -> None:
    controls, out = gold_run / "controls.yaml", gold_run / "run"
    before = ledger(out)
    again = run_cli("run", str(controls), "--out", str(out))
    assert again.returncode == 1 and "--resume" in again.stderr
    resumed = run_cli("run", str(controls), "--out", str(out), "--resume")
    assert resumed.returncode == 0 and "0 to run" in resumed.stderr
    assert len(before) == 4 and ledger(out) == before


def test_reverify_reruns_hidden_tests_and_lists_changes(gold_run: Path) -> None:
    out = gold_run / "run"
    clean = run_cli("replay", str(out), "--reverify")
    assert clean.returncode == 0, clean.stderr
    assert "reverify: 4 verdicts re-run, 0 changed" in clean.stdout
    # A record whose verdict no longer matches its patch is listed, not hidden.
    lines = (out / "trials.jsonl").read_text().splitlines()
    index = next(i for i, line in enumerate(lines) if json.loads(line)["arm"] == "ctrl")
    edited = json.loads(lines[index])
    edited.update(passed=True, outcome="success")
    lines[index] = json.dumps(edited)
    (out / "trials.jsonl").write_text("\n".join(lines) + "\n")
    flagged = run_cli("replay", str(out), "--accept-edits", "--reverify")
    assert flagged.returncode == 0, flagged.stderr
    assert "reverify: 4 verdicts re-run, 1 changed" in flagged.stdout
    assert f"changed: ctrl {edited['task_id']} repeat 0: pass -> fail" in flagged.stdout
