"""`deltarun gate RUN_B --baseline RUN_A` (and `gate RUN_A RUN_B`) on a real run pair in Docker: RUN_A is "main"
(its agent arm does nothing), RUN_B "the pull request" (its agent arm fixes every task),
same suite and runtime, different agents. B against A passes superiority (exit 0), A
against B fails non-inferiority (exit 1), an export kit of A serves as the baseline, and a
baseline of another suite is refused with one line and exit 3, nothing written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
import yaml

from tests.conftest import run_cli
from tests.helpers import ADD_GOLD, make_suite, repo_task

pytestmark = pytest.mark.docker

TASKS = 3
NOOP = {"type": "scripted", "action": "noop"}


def run_pair(root: Path) -> tuple[Path, Path]:
    """RUN_A (agent: noop) and RUN_B (agent: the gold patch), one sealed suite."""
    from runner.config.loader import load_controls
    from runner.suite.sealing import seal_target

    ids = [f"t{i}" for i in range(TASKS)]
    pr = root / "pr"
    pr.mkdir()
    for task_id in ids:
        (pr / f"{task_id}.diff").write_text(ADD_GOLD)
    ctrl = {"name": "ctrl", "control": True, "agent": NOOP}
    controls_a = make_suite(
        root, [repo_task(i) for i in ids], [ctrl, {"name": "agent", "agent": NOOP}]
    )
    data = yaml.safe_load(controls_a.read_text())
    data["arms"] = [ctrl, {"name": "agent", "agent": {"type": "patch", "dir": "pr"}}]
    controls_b = root / "controls_b.yaml"
    controls_b.write_text(yaml.safe_dump(data, sort_keys=False))
    seal_target(controls_b, load_controls)
    runs = []
    for name, controls in (("run_a", controls_a), ("run_b", controls_b)):
        out = root / name
        result = run_cli("run", str(controls), "--out", str(out), "-j", "2")
        assert result.returncode == 0, result.stderr
        runs.append(out)
    return runs[0], runs[1]


def test_a_pull_request_is_gated_against_the_last_accepted_run(tmp_path: Path) -> None:
    run_a, run_b = run_pair(tmp_path)
    xml = tmp_path / "g.xml"
    result = run_cli(
        "gate", str(run_b), "--baseline", str(run_a), "--superiority", "0", "--junit", str(xml)
    )
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert "gate: PASS (exit 0)" in result.stdout
    assert "baseline: run " in result.stdout and "(agent vs agent)" in result.stdout
    decision = json.loads((run_b / "decision.json").read_text())
    meta_a = json.loads((run_a / "run.json").read_text())
    base = decision["baseline"]
    assert base["run_id"] == meta_a["run_id"] and base["suite_sha256"] == meta_a["suite_sha256"]
    assert base["protocol_sha256"] == meta_a["protocol_sha256"] != decision["protocol_sha256"]
    assert len(base["ledger_sha256"]) == 64 and base["arms"] == {"agent": "agent"}
    assert base["path"] == str(run_a.resolve()) and base["baseline_arm"] is None
    sup = next(c for c in decision["criteria"] if c["name"] == "superiority")
    assert (sup["arm"], sup["estimate"], sup["n"]) == ("agent", 1.0, TASKS)
    assert decision["tasks"] == {"agent": {"helped": ["t0", "t1", "t2"], "hurt": []}}
    suite = ET.parse(xml).getroot().find("testsuite[@name='agent']")
    assert suite is not None and suite.get("failures") == "0"
    # replay re-checks the decision while the baseline is where it was recorded
    replayed = run_cli("replay", str(run_b))
    assert replayed.returncode == 0, replayed.stderr
    assert "decision.json: identical" in replayed.stdout

    # gate RUN_A RUN_B says the same, pairing as compare does; the baseline is given once
    first = (run_b / "decision.json").read_bytes()
    positional = run_cli("gate", str(run_a), str(run_b), "--superiority", "0")
    assert positional.returncode == 0, (positional.stdout, positional.stderr)
    assert (run_b / "decision.json").read_bytes() == first
    twice = run_cli("gate", str(run_a), str(run_b), "--baseline", str(run_a), "--superiority", "0")
    assert twice.returncode == 2 and "give the baseline once" in twice.stderr, twice.stderr
    assert twice.stderr.strip().count("\n") == 0

    # the other way round: main's agent against the pull request's fails non-inferiority
    worse = run_cli(
        "gate", str(run_a), "--baseline", str(run_b), "--non-inferiority", "0.1",
        "--junit", str(xml),
    )  # fmt: skip
    assert worse.returncode == 1, (worse.stdout, worse.stderr)
    assert "fail       non_inferiority agent: estimate -1.000" in worse.stdout
    case = (
        ET.parse(xml).getroot().find("testsuite[@name='agent']/testcase[@name='non_inferiority']")
    )
    assert case is not None and case.find("failure") is not None

    # an export kit of RUN_A is baseline enough; --baseline-arm names the arm
    kit = tmp_path / "kit"
    exported = run_cli("export", str(run_a), "--kit", str(kit))
    assert exported.returncode == 0, exported.stderr
    shutil.rmtree(run_a)
    from_kit = run_cli(
        "gate", str(run_b), "--baseline", str(kit), "--baseline-arm", "ctrl", "--superiority", "0"
    )
    assert from_kit.returncode == 0, (from_kit.stdout, from_kit.stderr)
    base = json.loads((run_b / "decision.json").read_text())["baseline"]
    assert base["path"] == str(kit.resolve()) and base["arms"] == {"agent": "ctrl"}
    assert base["run_id"] == meta_a["run_id"]

    # the kit moved away: replay says the baseline decision is unchecked, in one line, exit 0
    shutil.move(kit, tmp_path / "kit-moved")
    unchecked = run_cli("replay", str(run_b))
    assert unchecked.returncode == 0, unchecked.stderr
    assert "left unchecked" in unchecked.stdout

    # a baseline of another suite: exit 3, one line, nothing written
    other = tmp_path / "other"
    shutil.copytree(tmp_path / "kit-moved" / "run", other)
    meta = json.loads((other / "run.json").read_text())
    (other / "run.json").write_text(json.dumps({**meta, "suite_sha256": "0" * 64}))
    before = (run_b / "decision.json").read_bytes()
    refused = run_cli("gate", str(run_b), "--baseline", str(other), "--superiority", "0",
                      "--junit", str(tmp_path / "r.xml"))  # fmt: skip
    assert refused.returncode == 3, (refused.stdout, refused.stderr)
    assert refused.stderr.strip().count("\n") == 0 and "Traceback" not in refused.stderr
    assert "another suite" in refused.stderr
    assert (run_b / "decision.json").read_bytes() == before
    assert not (tmp_path / "r.xml").exists()
