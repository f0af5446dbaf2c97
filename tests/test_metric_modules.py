"""User metrics modules: loaded only when their digest matches the pin."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from runner.config.controls import MetricsSpec
from runner.errors import DigestMismatch, UserError
from runner.grading.metric_modules import load_metrics
from runner.hashing import sha256_bytes
from runner.records import AnswerTask
from tests.conftest import run_cli
from tests.helpers import make_suite

SOURCE = b"def close_enough(answer, task, wall_s):\n    return abs(answer - task.expect) <= 0.5\n"


def test_load_checks_the_pin_and_the_names() -> None:
    spec = MetricsSpec(module="m.py", sha256=sha256_bytes(SOURCE), functions=["close_enough"])
    registry = load_metrics(spec, SOURCE, "m.py")
    task = AnswerTask.model_validate(
        {
            "id": "q",
            "kind": "ordinary",
            "prompt": "p",
            "expect": 2,
            "metrics": ["close_enough"],
            "deadline_s": 5,
        }
    )
    assert registry["close_enough"](2.4, task, 1.0) and not registry["close_enough"](3, task, 1.0)
    assert "exact_match" in registry
    with pytest.raises(DigestMismatch, match="digest mismatch"):
        load_metrics(spec, SOURCE + b"# changed\n", "m.py")
    with pytest.raises(UserError, match="pin the module with 'sha256: "):
        load_metrics(spec.model_copy(update={"sha256": ""}), SOURCE, "m.py")
    with pytest.raises(UserError, match="'missing'"):
        load_metrics(spec.model_copy(update={"functions": ["missing"]}), SOURCE, "m.py")


@pytest.mark.docker
def test_run_with_a_pinned_metrics_module(tmp_path: Path, docker_api: Any) -> None:
    (tmp_path / "metrics.py").write_bytes(SOURCE)
    (tmp_path / "answers").mkdir()
    (tmp_path / "answers" / "q.answer.json").write_text("2.3")
    task = {
        "id": "q",
        "kind": "ordinary",
        "prompt": "What is 1 + 1?",
        "expect": 2,
        "metrics": ["close_enough"],
        "deadline_s": 30,
    }
    controls = make_suite(
        tmp_path,
        [task],
        [
            {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
            {"name": "cand", "agent": {"type": "patch", "dir": "answers"}},
        ],
        seal=False,
    )
    data = yaml.safe_load(controls.read_text())
    data["metrics"] = {
        "module": "metrics.py",
        "sha256": sha256_bytes(SOURCE),
        "functions": ["close_enough"],
    }
    controls.write_text(yaml.safe_dump(data, sort_keys=False))
    assert run_cli("seal", str(controls)).returncode == 0
    out = tmp_path / "run"
    result = run_cli("run", str(controls), "--out", str(out))
    assert result.returncode == 0, result.stderr
    records = {
        json.loads(x)["arm"]: json.loads(x) for x in (out / "trials.jsonl").read_text().splitlines()
    }
    assert records["cand"]["outcome"] == "success" and records["ctrl"]["outcome"] == "miss"
    report = (out / "report.md").read_text()
    assert f"| metric `close_enough` | `metrics.py` `{sha256_bytes(SOURCE)}` |" in report
    # A changed module stops the next run with exit 3 before any sandbox.
    (tmp_path / "metrics.py").write_bytes(SOURCE + b"# tampered\n")
    again = run_cli("run", str(controls), "--out", str(tmp_path / "run2"))
    assert again.returncode == 3 and "metrics.py" in again.stderr
    assert not (tmp_path / "run2").exists()
