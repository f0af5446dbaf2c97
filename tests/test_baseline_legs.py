"""`baseline: both`: an arm runs as <name>-on and <name>-off legs on the same jobs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runner.config.loader import parse_controls
from runner.errors import UserError
from tests.conftest import run_cli
from tests.helpers import make_suite, repo_task, write_agent

FIXER = (
    'grep -q "without the fixer" "$DELTARUN_PROMPT_FILE" && exit 0\n'
    '[ "${FIX:-on}" = off ] && exit 0\n'
    "sed -i 's/a - b/a + b/' calc/__init__.py\n"
)


def test_legs_expand_and_validate() -> None:
    base = (
        "protocol_id: p\nsuite: {file: t}\narms:\n"
        "  - {name: ctrl, control: true, agent: {type: scripted, action: noop}}\n"
    )
    controls = parse_controls(
        base + "  - {name: c, agent: {type: scripted, action: noop}, "
        "baseline: both, toggles: {env: {FIX: 'off'}}}\n",
        "x",
    )
    assert [leg.name for leg in controls.legs()] == ["ctrl", "c-on", "c-off"]
    assert controls.baseline_pairs() == [("c-on", "c-off")]
    # Toggles alone run the arm as authored (skill-on, the default): one leg, no pair.
    alone = parse_controls(
        base + "  - {name: c, agent: {type: scripted, action: noop}, toggles: {env: {A: '1'}}}\n",
        "x",
    )
    assert alone.arms[1].baseline == "on" and alone.baseline_pairs() == []
    assert [(leg.name, leg.toggles) for leg in alone.legs()] == [("ctrl", None), ("c", None)]
    for bad, needle in (
        (
            "  - {name: c, agent: {type: scripted, action: noop}, baseline: both}\n",
            "needs 'toggles'",
        ),
        (
            "  - {name: c, control: true, agent: {type: scripted, action: noop}, "
            "toggles: {env: {A: '1'}}}\n",
            "cannot have toggles",
        ),
        (
            "  - {name: c, agent: {type: scripted, action: noop}, baseline: both, "
            "toggles: {env: {DELTARUN_ARM: x}}}\n",
            "cannot be toggled",
        ),
        (
            "  - {name: c-on, agent: {type: scripted, action: noop}}\n"
            "  - {name: c, agent: {type: scripted, action: noop}, baseline: both, "
            "toggles: {prompt_suffix: x}}\n",
            "must be unique",
        ),
    ):
        with pytest.raises(UserError, match=needle):
            parse_controls(base + bad, "x")


@pytest.mark.docker
def test_on_and_off_legs_run_on_the_same_jobs(tmp_path: Path, docker_api: Any) -> None:
    agent = write_agent(tmp_path, "fixer", FIXER)
    controls = make_suite(
        tmp_path,
        [repo_task(f"t{i}") for i in range(2)],
        [
            {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
            {"name": "env", "agent": agent, "baseline": "both", "toggles": {"env": {"FIX": "off"}}},
            {
                "name": "prompt",
                "agent": agent,
                "baseline": "both",
                "toggles": {"prompt_suffix": "\n(without the fixer)"},
            },
        ],
    )
    out = tmp_path / "run"
    result = run_cli("run", str(controls), "--out", str(out), "-j", "2")
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in (out / "trials.jsonl").read_text().splitlines()]
    outcome = {(r["arm"], r["task_id"]): r["outcome"] for r in records}
    assert len(records) == 10
    for leg, expected in (
        ("env-on", "success"),
        ("env-off", "miss"),
        ("prompt-on", "success"),
        ("prompt-off", "miss"),
    ):
        assert [outcome[(leg, f"t{i}")] for i in range(2)] == [expected, expected], leg
    report = json.loads((out / "report.json").read_text())
    cards = {card["candidate_arm"]: card for card in report["baseline_legs"]}
    assert set(cards) == {"env-on", "prompt-on"}
    card = cards["env-on"]
    assert card["control_arm"] == "env-off" and card["aggregate_delta"]["mean"] == 1.0
    assert {(c["candidate_status"], c["control_status"], c["delta"]) for c in card["per_case"]} == {
        ("pass", "fail", 1.0)
    }
    assert "## Baseline legs (capability on vs off)" in (out / "report.md").read_text()
