"""``run --retry-errors`` on the local pool, on the real Docker engine.

The first run loses a task's hidden-test archive between its checks and its trials (the
suite's folder on a share that went away): every trial of that task ends in an
infrastructure ``error``, the other task is scored. With the archive back,
``deltarun run --retry-errors`` runs those jobs again, and only those; the error records
stay in the ledger, the report scores the new ones, counts the retries and replays. An
agent that dresses its own failure up as the engine's gets a miss, which is never run again.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from runner.records import Outcome
from runner.run.service import RunOptions, RunService
from runner.store.rundir import RunDir
from runner.view.source import RunSource
from tests.conftest import run_cli
from tests.helpers import ADD_HIDDEN, make_suite, repo_task, write_agent

# The candidate writes the environment it sees into its patch, then fixes add().
SEEN = "env | grep -v '^HOSTNAME=' | sort > /workspace/seen_env.txt\n"
FIX = "sed -i 's/a - b/a + b/' calc/__init__.py\n"
# An agent that dresses its failure up as the infrastructure's, for a reroll: it says the
# engine failed and kills every process it can, itself last. Its trial is a miss.
SABOTEUR = (
    "echo 'SandboxError: Docker refused the sandbox (the engine went away)' >&2\n"
    "kill -9 -1 2>/dev/null\n"
    "kill -9 $$\n"
)


def suite(root: Path) -> Path:
    """Two tasks; t1's hidden archive is its own (a digest no other test's run has read)."""
    hidden = {**ADD_HIDDEN, "tests/unique.txt": uuid.uuid4().hex}
    return make_suite(
        root,
        [repo_task("t0"), repo_task("t1")],
        [
            {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
            {"name": "cand", "agent": write_agent(root, "fix", SEEN + FIX)},
            {"name": "saboteur", "agent": write_agent(root, "saboteur", SABOTEUR)},
        ],
        hidden={"t1": hidden},
    )


def seen_env(patch: str) -> list[str]:
    """The environment lines the candidate wrote into its patch (seen_env.txt's lines)."""
    part = patch.split("seen_env.txt", 1)[1].split("diff --git", 1)[0]
    return sorted(line for line in part.splitlines() if line.startswith("+") and "=" in line)


def test_only_the_errors_run_again_and_the_report_counts_them(
    tmp_path: Path, docker_api: Any
) -> None:
    controls, run = suite(tmp_path), tmp_path / "run"
    service, options = RunService(), RunOptions(out_dir=run, parallel=2)
    prepared = service.prepare(controls, options)
    hidden = tmp_path / "suite" / "hidden" / "t1.tar"
    away = hidden.with_name("t1.tar.away")
    hidden.rename(away)  # after every check passed: the trials meet a missing archive
    try:
        service.execute(prepared, options)
    finally:
        away.rename(hidden)
    first = RunDir(run).trials()
    by = {(t.arm, t.task_id): t for t in first}
    assert {k: t.outcome for k, t in by.items()} == {
        ("ctrl", "t0"): Outcome.MISS,
        ("cand", "t0"): Outcome.SUCCESS,
        ("saboteur", "t0"): Outcome.MISS,  # dressed up as the engine's failure: still a miss
        ("ctrl", "t1"): Outcome.ERROR,
        ("cand", "t1"): Outcome.ERROR,
        ("saboteur", "t1"): Outcome.MISS,  # ended before its verdict needed the archive
    }, [t.error for t in first]
    assert run_cli("report", str(run)).returncode == 0
    before = (run / "trials.jsonl").read_bytes()

    retried = run_cli("run", str(controls), "--out", str(run), "--retry-errors")
    assert retried.returncode == 0, retried.stderr
    assert "2 errors to run again" in retried.stderr + retried.stdout

    ledger = (run / "trials.jsonl").read_bytes()
    assert ledger.startswith(before)  # append-only: the error records stay, for audit
    added = [json.loads(line) for line in ledger[len(before) :].splitlines()]
    assert sorted((r["arm"], r["task_id"], r["attempt"]) for r in added) == [
        ("cand", "t1", 2),
        ("ctrl", "t1", 2),
    ]  # only the errors ran again: not the misses, not the saboteur's made-up failure
    now = {(t.arm, t.task_id): t for t in RunDir(run).trials()}
    assert now["cand", "t1"].outcome is Outcome.SUCCESS
    assert now["ctrl", "t1"].outcome is Outcome.MISS
    # The agent cannot tell a retry from a first run: it saw the same environment.
    assert seen_env(now["cand", "t1"].patch) == seen_env(now["cand", "t0"].patch) != []

    report = json.loads((run / "report.json").read_text())
    numbers = {**report, **(report.get("withheld_for_author") or {})}
    assert numbers["accountings"]["retried"] == 2
    assert numbers["accountings"]["retried_now"] == {"miss": 1, "success": 1}
    cand = next(a for a in numbers["arms"] if a["arm"] == "cand")
    assert (cand["passes"], cand["n"]) == (2, 2)
    row = next(r for r in report["checklist"] if r["item"] == "retries zero in the headline run")
    assert "2 error record(s) run again by --retry-errors" in row["detail"]
    replayed = run_cli("replay", str(run))
    assert replayed.returncode == 0 and "identical" in replayed.stdout, replayed.stderr

    again = run_cli("run", str(controls), "--out", str(run), "--retry-errors")
    assert again.returncode == 0, again.stderr
    assert "0 errors to run again" in again.stderr + again.stdout
    assert (run / "trials.jsonl").read_bytes() == ledger  # nothing left to retry
    # The viewer shows each job once, by the same rule; the retried errors stay readable.
    index = RunSource(run).index()
    assert len(index["trials"]) == 6 and len(index["retried"]) == 2
    assert {(e["arm"], e["out"]) for e in index["retried"].values()} == {
        ("ctrl", "error"),
        ("cand", "error"),
    }
    cells = {row["id"]: row["cells"] for row in index["rows"]}
    assert cells["t1"]["cand"]["counts"] == {"success": 1}
