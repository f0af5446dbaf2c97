"""Dollars in the report: per trial, per pass, per arm and the run's total; an unpriced live
arm is "not priced", never 0; reports of runs without prices keep their bytes."""

from __future__ import annotations

from typing import Any

import yaml

from runner.config.controls import Controls, Price
from runner.config.loader import parse_controls
from runner.records import Outcome
from runner.report.cost import NOT_PRICED, cost_json, cost_markdown, cost_table
from tests.test_scoring import trial

ROUTE = {"base_url": "http://127.0.0.1:9/v1", "model": "m-1"}


def controls(**changes: Any) -> Controls:
    data: dict[str, Any] = {
        "protocol_id": "p",
        "suite": {"file": "tasks.jsonl"},
        "runtime": {"network": "model-only"},
        "route": ROUTE,
        "arms": [
            {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
            {"name": "cli", "agent": {"type": "installed", "name": "codex", "version": "0.171.0"}},
        ],
    }
    data.update(changes)
    return parse_controls(yaml.safe_dump(data), "controls.yaml")


def test_price_dollars_per_million() -> None:
    price = Price(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)
    assert price.dollars(1_000_000, 0) == 3.0
    assert price.dollars(1000, 2000, 10_000, 100) == (3000 + 30000 + 3000 + 375) / 1e6


def test_per_trial_per_pass_per_arm_and_the_total() -> None:
    trials = [
        trial("t1", "cli", Outcome.SUCCESS, cost_usd=0.25),
        trial("t2", "cli", Outcome.MISS, cost_usd=0.75),
        trial("t1", "ctrl", Outcome.MISS),
        trial("t2", "ctrl", Outcome.MISS),
    ]
    table = cost_table(
        controls(prices={"m-1": {"input": 1, "output": 2}}, budget={"run_usd": 1.0}),
        ["ctrl", "cli"],
        trials,
    )
    assert table is not None
    ctrl, cli = table.arms
    assert ctrl.status == "no model" and ctrl.usd == 0
    assert cli.status == "priced" and cli.usd == 1.0
    assert cli.per_trial == 0.5 and cli.per_pass == 1.0
    assert table.total_usd == 1.0 and table.budget_reached
    data = cost_json(table)
    assert data["total_usd"] == 1.0 and data["arms"][1]["usd_per_pass"] == 1.0
    text = "\n".join(cost_markdown(table))
    assert "| cli | 2/2 | $1.0000 | $0.5000 | $1.0000 |" in text
    assert "Run budget: $1.0000 reached" in text


def test_a_live_arm_without_prices_is_not_priced_never_zero() -> None:
    trials = [trial("t1", "cli", Outcome.SUCCESS), trial("t1", "ctrl", Outcome.MISS)]
    priced_elsewhere = controls(prices={"other": {"input": 1, "output": 1}})
    table = cost_table(priced_elsewhere, ["ctrl", "cli"], trials)
    assert table is not None
    assert table.arms[1].status == NOT_PRICED and table.arms[1].per_trial is None
    assert "| cli | not priced |" in "\n".join(cost_markdown(table))
    partly = cost_table(
        priced_elsewhere, ["cli"], [*trials, trial("t2", "cli", Outcome.MISS, cost_usd=0.1)]
    )
    assert partly is not None and partly.arms[0].status == "partly priced"


def test_no_prices_and_no_costs_means_no_section() -> None:
    trials = [trial("t1", "cli", Outcome.SUCCESS), trial("t1", "ctrl", Outcome.MISS)]
    assert cost_table(controls(), ["ctrl", "cli"], trials) is None
    assert cost_markdown(None) == []


def test_each_installed_arm_pins_its_agent_and_artifacts_digest() -> None:
    from runner.run.agent_images import Layered, artifact_pins

    pinned = "a" * 64
    data = controls()
    assert artifact_pins(data, []) == {
        "cli": {"agent": "codex@0.171.0", "artifacts_sha256": ""}  # nothing built, none pinned
    }
    built = Layered("cli", 1, "img", "tag", "sha256:1", pinned)
    assert artifact_pins(data, [built])["cli"]["artifacts_sha256"] == pinned
    arms = data.model_dump(mode="json", by_alias=True)["arms"]
    arms[1]["agent"]["artifacts_sha256"] = "b" * 64
    from_controls = controls(arms=arms)
    assert artifact_pins(from_controls, [])["cli"]["artifacts_sha256"] == "b" * 64
    from runner.report.contents import Pins
    from runner.report.markdown import pin_rows

    pins = Pins(
        protocol_id="p", protocol_sha256="p" * 64, suite_sha256="s" * 64, channel="scored",
        run_id="r", control_arm="ctrl", image_digests={}, agent_dir_digests={},
        ledger_sha256="l" * 64, deltarun_version="0", python_version="3",
        agent_artifacts=artifact_pins(from_controls, []),
    )  # fmt: skip
    assert f"| agent of cli | `codex@0.171.0` artifacts `{'b' * 64}` |" in pin_rows(pins)
