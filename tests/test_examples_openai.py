"""The examples/openai controls stay valid: they parse, pin the quickstart suite and name no key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from runner.config.arms import OpenAIAgent
from runner.config.loader import load_controls, missing_api_keys
from runner.suite.load import load_suite
from tests.conftest import path_lock

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "openai"
QUICKSTART = EXAMPLES.parent / "quickstart"


@pytest.fixture(scope="module", autouse=True)
def built_quickstart() -> None:
    """Build the quickstart suite into suite/ here (git-ignored, not committed) as `make
    examples` does: a controls file names only paths inside its own folder."""
    with path_lock("examples-openai"):
        result = subprocess.run(
            [sys.executable, str(QUICKSTART / "build_suite.py"), "--out", str(EXAMPLES)],
            capture_output=True,
            text=True,
            check=False,
        )
    assert result.returncode == 0, result.stderr
    assert (EXAMPLES / "suite" / "tasks.jsonl").is_file()


@pytest.mark.parametrize("name", ["controls.yaml", "controls.command.yaml"])
def test_example_controls_load_and_pin_the_quickstart_suite(name: str) -> None:
    loaded = load_controls(EXAMPLES / name)
    suite = load_suite(loaded.suite_path, loaded.controls.suite.sha256)
    assert len(suite.tasks) == 16
    assert loaded.controls.route is not None
    assert missing_api_keys(loaded.controls, {}) == []  # local servers need no key


def test_the_openai_example_has_a_model_control_beside_the_candidate() -> None:
    controls = load_controls(EXAMPLES / "controls.yaml").controls
    control = next(arm for arm in controls.arms if arm.control)
    assert isinstance(control.agent, OpenAIAgent)
    routes = {arm.name: controls.route_for(arm.agent) for arm in controls.arms}
    assert routes["small-model"].model != routes["candidate"].model  # type: ignore[union-attr]
