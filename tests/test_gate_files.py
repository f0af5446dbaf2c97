"""`deltarun gate` through the real command on copies of the committed runs: exit codes, the
lines, JUnit XML parsed back, the summary (and $GITHUB_STEP_SUMMARY), decision.json and its
replay byte for byte; command-line criteria refused for a scored run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from runner.report.gate_decision import Criterion, GateDecision, Verdict
from runner.report.gate_formats import decision_json, junit_xml, summary_markdown
from tests.conftest import run_cli

FIXTURES = Path(__file__).parent / "fixtures"


def copy(tmp_path: Path, name: str = "run-quickstart") -> Path:
    target = tmp_path / name
    shutil.copytree(FIXTURES / name, target)
    return target


def test_a_pass_an_undecided_and_a_fail_exit_0_5_and_1(tmp_path: Path) -> None:
    run = copy(tmp_path)
    # candidate vs frozen-stub-v1: +0.583, 95% [+0.225, +0.807], n=12 (report.md)
    passed = run_cli("gate", str(run), "--superiority", "0", "--non-inferiority", "0.05")
    assert passed.returncode == 0, passed.stderr
    lines = passed.stdout.splitlines()
    assert lines[0] == "pass       preconditions: 9 of 9 hold"
    assert (
        "pass       superiority candidate: estimate +0.583, 95% [+0.225, +0.807], above +0.000, "
        "n=12, newcombe-paired" in lines
    )
    assert "gate: PASS (exit 0)" in lines
    undecided = run_cli("gate", str(run), "--superiority", "0.5", "--arm", "candidate")
    assert undecided.returncode == 5, undecided.stderr
    assert "undecided  superiority candidate" in undecided.stdout
    assert "gate: NOT DECIDED (exit 5)" in undecided.stdout
    assert "gold" not in undecided.stdout
    failed = run_cli("gate", str(run), "--superiority", "0.5", "--superiority", "0.9")
    assert failed.returncode == 1, failed.stderr
    assert "fail       superiority candidate" in failed.stdout
    assert "gate: FAIL (exit 1)" in failed.stdout
    decision = json.loads((run / "decision.json").read_text())
    assert (decision["decision"], decision["exit_code"]) == ("fail", 1)
    assert decision["source"] == "command line" and decision["spec"] == {"superiority": 0.9}
    protocol = json.loads((FIXTURES / "run-quickstart" / "run.json").read_text())
    assert decision["protocol_sha256"] == protocol["protocol_sha256"]
    report = json.loads((run / "report.json").read_text())
    assert decision["ledger_sha256"] == report["pins"]["ledger_sha256"]
    # nothing but decision.json was added to the run directory
    added = {p.name for p in run.iterdir()} - {
        p.name for p in (FIXTURES / "run-quickstart").iterdir()
    }
    assert added == {"decision.json"}


def test_missing_data_is_not_decided_never_0(tmp_path: Path) -> None:
    run = copy(tmp_path)
    # the quickstart prices nothing: a cost criterion has no data
    result = run_cli("gate", str(run), "--cost-per-pass-max", "1", "--arm", "candidate")
    assert result.returncode == 5, result.stderr
    assert "missing    cost_per_pass_max candidate" in result.stdout
    assert "nothing priced in this run" in result.stdout


def test_junit_summary_and_the_step_summary(tmp_path: Path) -> None:
    run = copy(tmp_path)
    step = tmp_path / "step.md"
    step.write_text("earlier step\n")
    result = run_cli(
        "gate",
        str(run),
        "--superiority",
        "0.5",
        "--error-rate-max",
        "0",
        "--junit",
        str(tmp_path / "gate.xml"),
        "--summary",
        str(tmp_path / "gate.md"),
        env={"GITHUB_STEP_SUMMARY": str(step)},
    )
    assert result.returncode == 5, result.stderr
    root = ET.parse(tmp_path / "gate.xml").getroot()
    assert root.tag == "testsuites"
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert list(suites) == ["preconditions", "candidate", "gold", "frozen-stub-v1"]
    cand = suites["candidate"]
    assert (cand.get("tests"), cand.get("failures"), cand.get("skipped")) == ("2", "0", "1")
    props = {p.get("name"): p.get("value") for p in cand.findall("properties/property")}
    assert props["hurt"] == ""
    assert props["helped"].split() == [
        "answer-log-error-count",
        "daterange-inclusive-end",
        "glob-doublestar",
        "lru-get-recency",
        "roman-strict-parse",
        "slugify-accents",
        "wrap-long-words",
    ]
    sup = cand.find("testcase[@name='superiority']")
    assert sup is not None and sup.find("failure") is None
    skipped = sup.find("skipped")
    assert skipped is not None
    assert skipped.get("message") == (
        "undecided: estimate +0.583, 95% [+0.225, +0.807], above +0.500, n=12, newcombe-paired"
    )
    gold = suites["gold"].find("testcase[@name='superiority']")
    assert gold is not None and gold.find("skipped") is None and gold.find("failure") is None
    assert "+0.657" in (gold.findtext("system-out") or "")
    assert root.get("tests") == str(sum(int(s.get("tests") or 0) for s in suites.values()))
    # every test case has a name, a classname and at most one of failure / skipped
    for case in root.iter("testcase"):
        assert case.get("name") and case.get("classname", "").startswith("deltarun.gate.")
        assert len(case.findall("failure")) + len(case.findall("skipped")) <= 1
    summary = (tmp_path / "gate.md").read_text()
    assert summary.startswith("### deltarun gate: NOT DECIDED (exit 5)\n")
    assert (
        "| superiority | candidate | **undecided** | +0.583 | [+0.225, +0.807] | +0.500 | 12 |"
        in (summary)
    )
    assert "| preconditions | | pass | 9 of 9 hold | | | |" in summary
    assert "**candidate** helped 7: `answer-log-error-count`" in summary
    assert "**gold** helped 12:" in summary and "and 2 more; hurt 0: none" in summary
    assert len(summary.splitlines()) < 40
    assert step.read_text() == "earlier step\n" + summary


def test_replay_rebuilds_decision_json_byte_for_byte_and_catches_a_tampered_one(
    tmp_path: Path,
) -> None:
    run = copy(tmp_path)
    untouched = run_cli("replay", str(run))  # a run without decision.json replays as before
    assert untouched.returncode == 0, untouched.stderr
    assert "decision.json" not in untouched.stdout
    assert not (run / "decision.json").exists()
    gated = run_cli("gate", str(run), "--non-inferiority", "0.2")
    assert gated.returncode == 0, gated.stderr
    stored = (run / "decision.json").read_bytes()
    replayed = run_cli("replay", str(run))
    assert replayed.returncode == 0, replayed.stderr
    assert f"{run / 'decision.json'}: identical" in replayed.stdout
    assert (run / "decision.json").read_bytes() == stored
    data = json.loads(stored)
    assert (data["exit_code"], data["decision"]) == (0, "pass")
    data["criteria"][-1]["ci95"][0] = -0.5  # a bound moved
    (run / "decision.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    tampered = run_cli("replay", str(run))
    assert tampered.returncode == 3
    assert tampered.stderr.strip().splitlines() == [
        f"deltarun: error: {run / 'decision.json'}: the replayed decision differs from the "
        "stored one; decision.json or the run directory was changed after the gate (run "
        "`deltarun gate` again)"
    ]
    data["source"] = "controls"  # the controls have no gate: section
    (run / "decision.json").write_text(json.dumps(data))
    assert run_cli("replay", str(run)).returncode == 3


def test_criteria_are_required_and_the_scored_channel_refuses_command_line_ones(
    tmp_path: Path,
) -> None:
    run = copy(tmp_path)
    none = run_cli("gate", str(run))
    assert none.returncode == 2
    assert "no gate: section in the controls" in none.stderr
    assert len(none.stderr.strip().splitlines()) == 1
    unknown = run_cli("gate", str(run), "--superiority", "0", "--arm", "nope")
    assert unknown.returncode == 2 and "--arm nope: not a candidate arm" in unknown.stderr
    scored_run = copy(tmp_path, "run-features")  # a committed channel: scored run
    controls = scored_run / "controls.yaml"
    assert "channel: scored" in controls.read_text()
    scored = run_cli("gate", str(scored_run), "--non-inferiority", "0.05")
    assert scored.returncode == 2
    assert scored.stderr.strip().splitlines() == [
        f"deltarun: error: {controls}: channel scored takes its criteria from the controls' "
        "gate: section (hashed before the run); drop the command-line criteria"
    ]
    assert not (scored_run / "decision.json").exists()
    # its controls have no gate: section either: nothing to decide, in one line
    assert run_cli("gate", str(scored_run)).returncode == 2


def test_a_gate_written_after_the_run_changes_the_protocol(tmp_path: Path) -> None:
    run = copy(tmp_path)
    controls = run / "controls.yaml"
    controls.write_text(controls.read_text() + "gate: {non_inferiority: 0.05}\n")
    result = run_cli("gate", str(run))
    assert result.returncode == 3
    assert "does not hash to the run's protocol" in result.stderr


@pytest.mark.parametrize("verdict", list(Verdict))
def test_the_formats_of_one_criterion(verdict: Verdict) -> None:
    decision = GateDecision(
        (Criterion("non_inferiority", "a|b", verdict, -0.05, 0.1, -0.02, 0.3, 8, "t"),), ()
    )
    text = decision_json(decision, {"run_id": "r"})
    data = json.loads(text)
    assert data["criteria"][0]["ci95"] == [-0.02, 0.3]
    assert data["exit_code"] == {"pass": 0, "fail": 1}.get(verdict.value, 5)
    assert decision_json(decision, {"run_id": "r"}) == text
    case = ET.fromstring(junit_xml(decision, "r")).find("testsuite/testcase")
    assert case is not None
    assert (case.find("failure") is not None) == (verdict is Verdict.FAIL)
    assert (case.find("skipped") is not None) == (verdict in (Verdict.UNDECIDED, Verdict.MISSING))
    assert "| non_inferiority | a\\|b |" in summary_markdown(decision, "r", "p" * 64, "controls")


def test_every_criterion_of_the_controls_has_its_command_line_option() -> None:
    """The command line's criteria are GateSpec's, field for field (arms, require and the
    sequential design have options of their own or none)."""
    from dataclasses import fields

    from runner.cli.gate import Criteria
    from runner.config.gate_spec import GateSpec

    criteria = {field.name for field in fields(Criteria)}
    assert criteria == set(GateSpec.model_fields) - {"arms", "require", "sequential"}


def test_the_default_required_rows_are_rows_of_the_checklist() -> None:
    """A renamed checklist row would leave a default the gate can never find (missing, so
    never a pass): each default names a row the report's checklist writes."""
    from runner.config.gate_spec import DEFAULT_REQUIRED_ROWS
    from runner.report.assemble import build_report
    from runner.store.rundir import RunDir

    built = build_report(RunDir(FIXTURES / "run-quickstart"))
    assert set(DEFAULT_REQUIRED_ROWS) <= {row.item for row in built.rows}
