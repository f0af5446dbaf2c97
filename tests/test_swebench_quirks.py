"""SWE-bench's quirks as SWE-bench has them (issue 38, item 4): a predictions arm may be
called ``empty`` (deltarun's own arm that changes nothing is ``no-change``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.conftest import run_cli
from tests.test_swebench import dataset, import_args

__all__ = ["dataset"]  # the module-scoped fixture, shared with test_swebench


def test_predictions_named_empty_are_a_normal_arm_beside_the_no_change_control(
    dataset: dict[str, Path], tmp_path: Path, docker_api: object
) -> None:
    """``--predictions empty=FILE`` imports as a patch arm named ``empty``; ``--control
    no-change`` adds deltarun's no-op arm; a run resolves exactly model-a's instances on
    the ``empty`` arm and none on the control."""
    suite = tmp_path / "s"
    made = run_cli(
        *import_args(
            dataset,
            suite,
            "--predictions",
            f"empty={dataset['model-a']}",
            "--control",
            "no-change",
            "--timeout",
            "120",
        )
    )
    assert made.returncode == 0, made.stderr
    controls = yaml.safe_load((suite / "controls.yaml").read_text())
    arms = {arm["name"]: arm for arm in controls["arms"]}
    assert arms["empty"]["agent"] == {"type": "patch", "dir": "predictions/empty"}
    assert "control" not in arms["empty"]
    assert arms["no-change"] == {
        "name": "no-change",
        "control": True,
        "agent": {"type": "scripted", "action": "noop"},
    }
    assert (suite / "predictions" / "empty" / "textkit-1.diff").read_text().strip()
    run = run_cli("run", str(suite / "controls.yaml"), "--out", str(tmp_path / "run"), "-j", "2")
    assert run.returncode == 0, run.stderr
    records = [json.loads(x) for x in (tmp_path / "run" / "trials.jsonl").read_text().splitlines()]
    resolved = {
        arm: sorted(r["task_id"] for r in records if r["arm"] == arm and r["outcome"] == "success")
        for arm in ("empty", "no-change")
    }
    assert resolved == {"empty": ["textkit-1", "textkit-2"], "no-change": []}


@pytest.mark.parametrize(
    ("names", "control", "builtin"),
    [
        ((), None, "no-change"),
        (("no-change",), "deltarun-no-change", "deltarun-no-change"),
    ],
)
def test_the_no_change_arm_moves_aside_for_a_user_arm_of_its_name(
    dataset: dict[str, Path],
    tmp_path: Path,
    names: tuple[str, ...],
    control: str | None,
    builtin: str,
) -> None:
    extra: list[str] = []
    for name in names:
        extra += ["--predictions", f"{name}={dataset['model-a']}"]
    if control is not None:
        extra += ["--control", control]
    made = run_cli(*import_args(dataset, tmp_path / "s", *extra))
    assert made.returncode == 0, made.stderr
    controls = yaml.safe_load((tmp_path / "s" / "controls.yaml").read_text())
    arms = {arm["name"]: arm for arm in controls["arms"]}
    assert arms[builtin]["agent"] == {"type": "scripted", "action": "noop"}
    assert arms[builtin]["control"] is True
    for name in names:
        assert arms[name]["agent"]["type"] == "patch"


def test_control_empty_without_such_an_arm_names_the_arms_there_are(
    dataset: dict[str, Path], tmp_path: Path
) -> None:
    made = run_cli(
        *import_args(
            dataset,
            tmp_path / "s",
            "--predictions",
            f"a={dataset['model-a']}",
            "--control",
            "empty",
        )
    )
    assert made.returncode == 1
    assert "--control 'empty' is not an arm; choose one of a, no-change" in made.stderr
    assert "Traceback" not in made.stderr
