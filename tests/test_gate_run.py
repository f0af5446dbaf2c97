"""`deltarun gate` on real runs in Docker, criteria from the controls' gate: section: a
candidate that fixes every task passes against a noop control (exit 0), a null arm is not
decided (exit 5), a candidate that breaks every task fails non-inferiority (exit 1), each
with its decision.json, JUnit and summary."""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
import yaml

from tests.conftest import run_cli
from tests.helpers import ADD_BREAK, ADD_FIXED, ADD_GOLD, make_suite, repo_task

pytestmark = pytest.mark.docker

TASKS = 4
NOOP = {"type": "scripted", "action": "noop"}


def run_with_gate(
    root: Path, arms: list[dict[str, object]], gate: dict[str, object], patch: str, fixed: bool
) -> Path:
    ids = [f"t{i}" for i in range(TASKS)]
    for arm in arms:
        agent = arm["agent"]
        if isinstance(agent, dict) and agent["type"] == "patch":
            folder = root / str(agent["dir"])
            folder.mkdir(parents=True)
            for task_id in ids:
                (folder / f"{task_id}.diff").write_text(patch)
    controls = make_suite(
        root,
        [repo_task(i) for i in ids],
        arms,
        fixtures={i: ADD_FIXED for i in ids} if fixed else None,
        seal=False,
    )
    data = yaml.safe_load(controls.read_text())
    controls.write_text(yaml.safe_dump({**data, "gate": gate}, sort_keys=False))
    from runner.config.loader import load_controls
    from runner.suite.sealing import seal_target

    seal_target(controls, load_controls)
    out = root / "run"
    result = run_cli("run", str(controls), "--out", str(out), "-j", "2")
    assert result.returncode == 0, result.stderr
    return out


def test_a_fixing_candidate_passes_and_a_null_arm_is_not_decided(tmp_path: Path) -> None:
    arms = [
        {"name": "ctrl", "control": True, "agent": NOOP},
        {"name": "fixer", "agent": {"type": "patch", "dir": "fixer"}},
        {"name": "null", "agent": NOOP},
    ]
    gate = {"arms": ["fixer"], "superiority": 0.0, "non_inferiority": 0.1, "error_rate_max": 0.0}
    run = run_with_gate(tmp_path, arms, gate, ADD_GOLD, fixed=False)
    result = run_cli(
        "gate", str(run), "--junit", str(tmp_path / "g.xml"), "--summary", str(tmp_path / "g.md")
    )
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert "gate: PASS (exit 0)" in result.stdout
    decision = json.loads((run / "decision.json").read_text())
    assert (decision["source"], decision["decision"], decision["exit_code"]) == (
        "controls",
        "pass",
        0,
    )
    sup = next(c for c in decision["criteria"] if c["name"] == "superiority")
    # 4 of 4 tasks helped: Newcombe's paired interval is [0.307, 1] (tests/test_scoring.py)
    assert (sup["arm"], sup["estimate"], sup["n"]) == ("fixer", 1.0, TASKS)
    assert sup["ci95"][0] == pytest.approx(0.3071897, abs=1e-6)
    assert decision["tasks"] == {"fixer": {"helped": ["t0", "t1", "t2", "t3"], "hurt": []}}
    suite = ET.parse(tmp_path / "g.xml").getroot().find("testsuite[@name='fixer']")
    assert suite is not None and suite.get("failures") == "0" and suite.get("skipped") == "0"
    assert "**fixer** helped 4:" in (tmp_path / "g.md").read_text()
    # a scored run would refuse this; the exploratory one gates the null arm on the line
    null = run_cli("gate", str(run), "--arm", "null", "--non-inferiority", "0.1")
    assert null.returncode == 5, (null.stdout, null.stderr)
    assert "undecided  non_inferiority null: estimate +0.000" in null.stdout
    replayed = run_cli("replay", str(run))
    assert replayed.returncode == 0, replayed.stderr
    assert "decision.json: identical" in replayed.stdout


def test_a_breaking_candidate_fails_non_inferiority(tmp_path: Path) -> None:
    arms = [
        {"name": "ctrl", "control": True, "agent": NOOP},
        {"name": "breaker", "agent": {"type": "patch", "dir": "breaker"}},
    ]
    run = run_with_gate(tmp_path, arms, {"non_inferiority": 0.1}, ADD_BREAK, fixed=True)
    result = run_cli("gate", str(run), "--junit", str(tmp_path / "g.xml"))
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "fail       non_inferiority breaker: estimate -1.000" in result.stdout
    assert "gate: FAIL (exit 1)" in result.stdout
    root = ET.parse(tmp_path / "g.xml").getroot()
    case = root.find("testsuite[@name='breaker']/testcase[@name='non_inferiority']")
    assert case is not None
    failure = case.find("failure")
    assert failure is not None and "above -0.100" in (failure.get("message") or "")
    props = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert props == {"helped": "", "hurt": "t0 t1 t2 t3"}
    assert json.loads((run / "decision.json").read_text())["exit_code"] == 1
    # command-line criteria replace the controls' (exploratory): worse, so not superior
    superior = run_cli("gate", str(run), "--superiority", "0")
    assert superior.returncode == 1 and "fail       superiority breaker" in superior.stdout
