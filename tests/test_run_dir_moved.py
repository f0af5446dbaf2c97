"""A run directory stands alone (issue 39, item 5): moved, copied or exported, it still
shows its tasks' prompts and tags and replays byte for byte, because what the viewer
reads of the suite is kept in it (``task_texts.jsonl``), not read through the controls
path of the machine that recorded it. Only a run directory recorded before that file
existed reads its suite where run.json says its controls were.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from runner.run.prepare import prepare
from runner.store.rundir import TASK_TEXTS, RunDir
from runner.view.matrix import PROMPT_CHARS
from runner.view.source import RunSource
from tests.conftest import run_cli
from tests.helpers import ADD_GOLD, make_suite, repo_task

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
QUICKSTART = ROOT / "examples" / "quickstart" / "controls.yaml"
REPORTS = ("report.md", "report.json", "report.html", "scorecard.json")


def texts(lines: str) -> dict[str, tuple[str, list[str]]]:
    """Prompt and tags by task id, from task_texts.jsonl or a suite's tasks.jsonl."""
    rows = [json.loads(line) for line in lines.splitlines() if line.strip()]
    return {row["id"]: (row["prompt"], row.get("tags", [])) for row in rows}


def shown(rows: list[dict[str, Any]]) -> dict[str, tuple[str | None, list[str]]]:
    return {row["id"]: (row["prompt"], row["tags"]) for row in rows}


def cut(want: dict[str, tuple[str, list[str]]]) -> dict[str, tuple[str | None, list[str]]]:
    """As the matrix holds them: each prompt cut at ``PROMPT_CHARS``."""
    return {key: (prompt[:PROMPT_CHARS], tags) for key, (prompt, tags) in want.items()}


def copied(tmp_path: Path, name: str) -> Path:
    run = tmp_path / "elsewhere" / "copied" / name
    shutil.copytree(FIXTURES / name, run)
    return run


def replays_unchanged(run: Path, cwd: Path) -> None:
    before = {name: (run / name).read_bytes() for name in REPORTS if (run / name).exists()}
    assert len(before) >= 3
    result = run_cli("replay", str(run), cwd=cwd)
    assert result.returncode == 0, result.stderr
    assert "identical" in result.stdout + result.stderr
    assert {name: (run / name).read_bytes() for name in before} == before


@pytest.mark.parametrize("name", ["run-quickstart", "run-features"])
def test_a_committed_run_copied_elsewhere_shows_its_prompts_and_tags(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = copied(tmp_path, name)
    monkeypatch.chdir(tmp_path)  # the checkout's relative paths lead nowhere from here
    kept = texts((run / TASK_TEXTS).read_text(encoding="utf-8"))
    meta = RunDir(run).meta()
    assert list(kept) == [task["id"] for task in meta.tasks]  # every task, in run.json's order
    assert all(prompt for prompt, _ in kept.values()) and any(tags for _, tags in kept.values())
    if name == "run-quickstart":  # what the suite the run was recorded on says
        suite = QUICKSTART.parent / "suite" / "tasks.jsonl"
        assert kept == texts(suite.read_text(encoding="utf-8"))
    assert not Path(meta.controls_path).is_absolute()
    for path in run.iterdir():
        assert str(ROOT) not in path.read_text(encoding="utf-8", errors="replace"), path.name

    assert shown(RunSource(run).index()["rows"]) == cut(kept)

    done = run_cli("view", str(run), "--bundle", str(run / "view"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    script = (run / "view" / "data" / "index.js").read_text(encoding="ascii")
    prefix = 'dvData("index",0,'
    assert script.startswith(prefix) and script.endswith(");\n")
    bundled = json.loads(script[len(prefix) : -len(");\n")])
    assert shown(bundled["matrix"]["rows"]) == cut(kept)

    replays_unchanged(run, tmp_path)


def test_a_run_recorded_before_the_texts_reads_its_suite_where_its_controls_were(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = copied(tmp_path, "run-quickstart")
    monkeypatch.chdir(tmp_path)
    (run / TASK_TEXTS).unlink()
    assert RunDir(run).task_texts() is None
    meta = json.loads((run / "run.json").read_text(encoding="utf-8"))
    suite = texts((QUICKSTART.parent / "suite" / "tasks.jsonl").read_text(encoding="utf-8"))

    meta["controls_path"] = str(QUICKSTART)  # as that deltarun wrote it: absolute
    (run / "run.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    assert shown(RunSource(run).index()["rows"]) == cut(suite)

    meta["controls_path"] = str(tmp_path / "gone" / "controls.yaml")  # the suite moved
    (run / "run.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    rows = RunSource(run).index()["rows"]
    assert [row["id"] for row in rows] == list(suite)
    assert all(row["prompt"] is None and row["tags"] == [] for row in rows)
    replays_unchanged(run, tmp_path)  # an old run directory replays as it did


def test_a_new_run_keeps_its_texts_and_shows_them_moved_and_exported(tmp_path: Path) -> None:
    root = tmp_path / "orig"
    (root / "gold").mkdir(parents=True)
    tasks = []
    for i, prompt in enumerate(["Fix add().\u2028Carefully \u2014 please.", "Make add add."]):
        (root / "gold" / f"t{i}.diff").write_text(ADD_GOLD)
        tasks.append({**repo_task(f"t{i}", prompt=prompt), "tags": [f"tag-{i}", "calc"]})
    arms = [
        {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
        {"name": "gold", "agent": {"type": "patch", "dir": "gold"}},
    ]
    controls = make_suite(root, tasks, arms)
    assert "\u2028" in (root / "suite" / "tasks.jsonl").read_text(encoding="utf-8")  # sealed raw
    run = root / "run"
    prepare(controls, run, resume=False, image_digest=lambda image: "sha256:" + "0" * 64)
    want = {task["id"]: (task["prompt"], task["tags"]) for task in tasks}
    assert texts((run / TASK_TEXTS).read_text(encoding="utf-8")) == want
    assert RunDir(run).meta().controls_path == str(controls.resolve())  # a hint, no more

    # A kit carries the texts with the rest of the evidence.
    kit = tmp_path / "kit"
    done = run_cli("export", str(run), "--kit", str(kit))
    assert done.returncode == 0, done.stderr
    assert (kit / "run" / TASK_TEXTS).read_bytes() == (run / TASK_TEXTS).read_bytes()
    assert shown(RunSource(kit / "run").index()["rows"]) == want

    # The suite and the run moved together: run.json's controls path names nothing now.
    moved = tmp_path / "moved"
    root.rename(moved)
    assert not Path(RunDir(moved / "run").meta().controls_path).exists()
    assert shown(RunSource(moved / "run").index()["rows"]) == want

    # A run directory recorded before the file existed gets it when resumed.
    (moved / "run" / TASK_TEXTS).unlink()
    prepare(
        moved / "controls.yaml",
        moved / "run",
        resume=True,
        image_digest=lambda image: "sha256:" + "0" * 64,
    )
    assert texts((moved / "run" / TASK_TEXTS).read_text(encoding="utf-8")) == want


def test_task_texts_are_read_as_input(tmp_path: Path) -> None:
    run = copied(tmp_path, "run-features")
    lines = (run / TASK_TEXTS).read_text(encoding="utf-8").splitlines()
    hostile = [
        "not json",
        "[1, 2]",
        json.dumps({"id": 7, "prompt": "a number for an id"}),
        json.dumps({"id": "r0", "prompt": "a second line of r0 does not count"}),
        json.dumps({"id": "r1", "prompt": ["not", "text"], "tags": "not a list"}),
        "[" * 100_000,
    ]
    (run / TASK_TEXTS).write_text("\n".join([lines[0], *hostile, *lines[2:]]) + "\n")
    read = RunDir(run).task_texts()
    assert read is not None
    assert read["r0"].prompt.startswith("Synthetic task r0") and read["r0"].tags
    assert read["r1"].prompt == "" and read["r1"].tags == ()
    rows = {row["id"]: row for row in RunSource(run).index()["rows"]}
    assert rows["r1"]["prompt"] is None and rows["r1"]["tags"] == []
    assert rows["a0"]["prompt"] and rows["a0"]["tags"] == ["ordinary", "size-answer"]
