"""The validation link: seal pins a matching validation.json, channel scored requires it
(every task valid or excluded), and suite.exclude leaves tasks out of the plan. No Docker:
the validation files are written here as `deltarun validate` writes them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runner.config.loader import load_controls
from runner.errors import DigestMismatch, UserError
from runner.hashing import sha256_file
from runner.run.prepare import prepare
from tests.conftest import run_cli
from tests.helpers import make_suite, repo_task

ARMS = [{"name": "c", "control": True, "agent": {"type": "scripted", "action": "noop"}}]


class ReachedImages(Exception):
    """prepare got past every check before the images."""


def reached(_image: str) -> str:
    raise ReachedImages


def suite(tmp_path: Path, channel: str = "exploratory") -> Path:
    return make_suite(tmp_path, [repo_task("t1"), repo_task("t2")], ARMS, channel=channel)


def write_validation(controls: Path, verdicts: dict[str, str], digest: str | None = None) -> Path:
    tasks = controls.parent / "suite" / "tasks.jsonl"
    path = tasks.parent / "validation.json"
    document: dict[str, Any] = {
        "schema_version": 1,
        "suite_sha256": digest or sha256_file(tasks),
        "tasks": [{"id": k, "verdict": v, "detail": ""} for k, v in verdicts.items()],
    }
    path.write_text(json.dumps(document))
    return path


def set_suite_keys(controls: Path, **keys: Any) -> None:
    import yaml

    data = yaml.safe_load(controls.read_text())
    data["suite"].update(keys)
    controls.write_text(yaml.safe_dump(data, sort_keys=False))


def test_seal_pins_a_validation_of_this_suite_and_warns_about_a_stale_one(tmp_path: Path) -> None:
    controls = suite(tmp_path)
    stale = write_validation(controls, {"t1": "valid", "t2": "valid"}, digest="0" * 64)
    result = run_cli("seal", str(controls))
    assert result.returncode == 0 and "validated another version" in result.stderr
    assert load_controls(controls).controls.suite.validation is None
    stale.unlink()
    fresh = write_validation(controls, {"t1": "valid", "t2": "valid"})
    result = run_cli("seal", str(controls))
    assert result.returncode == 0, result.stderr
    assert load_controls(controls).controls.suite.validation == sha256_file(fresh)


def test_channel_scored_requires_a_pinned_validation(tmp_path: Path) -> None:
    controls = suite(tmp_path, channel="scored")
    with pytest.raises(UserError, match="channel scored needs a validated suite"):
        prepare(controls, tmp_path / "run", resume=False, image_digest=reached)


def test_channel_scored_requires_every_task_valid_or_excluded(tmp_path: Path) -> None:
    controls = suite(tmp_path, channel="scored")
    write_validation(controls, {"t1": "valid", "t2": "passes-without-fix"})
    assert run_cli("seal", str(controls)).returncode == 0
    with pytest.raises(UserError, match=r"1 task\(s\) not valid: t2 \(passes-without-fix\)"):
        prepare(controls, tmp_path / "run", resume=False, image_digest=reached)
    set_suite_keys(controls, exclude=["t2"])
    with pytest.raises(ReachedImages):
        prepare(controls, tmp_path / "run", resume=False, image_digest=reached)


def test_an_edited_validation_is_a_digest_mismatch(tmp_path: Path) -> None:
    controls = suite(tmp_path, channel="scored")
    path = write_validation(controls, {"t1": "valid", "t2": "gold-fails"})
    assert run_cli("seal", str(controls)).returncode == 0
    path.write_text(path.read_text().replace("gold-fails", "valid"))
    with pytest.raises(DigestMismatch, match=r"validation\.json: digest mismatch"):
        prepare(controls, tmp_path / "run", resume=False, image_digest=reached)


def test_excluded_tasks_are_not_planned_and_unknown_ids_are_refused(tmp_path: Path) -> None:
    controls = suite(tmp_path)
    before = load_controls(controls).protocol_sha256
    set_suite_keys(controls, exclude=["t2"])
    assert load_controls(controls).protocol_sha256 != before  # part of the protocol hash
    prepared = prepare(
        controls, tmp_path / "run", resume=False, image_digest=lambda _i: "sha256:" + "0" * 64
    )
    assert {job.task_id for job in prepared.jobs} == {"t1"}
    assert [t["id"] for t in prepared.meta.tasks] == ["t1"]
    set_suite_keys(controls, exclude=["t9"])
    with pytest.raises(UserError, match=r"suite\.exclude: 't9' is not a task"):
        prepare(controls, tmp_path / "run2", resume=False, image_digest=reached)
