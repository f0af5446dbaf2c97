"""examples/pack30: reproducible from its sources, and every task checked on the host.

No Docker: the pack is built with the quickstart's builder into temporary
directories, and each task's tests run with this interpreter's pytest in a
temporary copy of the built fixture, as the verify sandbox would see it (the
hidden files copied over the tree, the patch applied with ``git apply``).
The outcome the recorded candidate must get is read from the task table of
examples/pack30/README.md, so the README cannot drift from the recordings.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from runner.config.loader import load_controls, scored_channel_problems
from runner.suite.load import load_suite

ROOT = Path(__file__).resolve().parents[1]
PACK = ROOT / "examples" / "pack30"
BUILDER = ROOT / "examples" / "quickstart" / "build_suite.py"
ROW = re.compile(r"^\| `([a-z0-9-]+)` \| (ordinary|negative) \|.*\| ([a-z_]+) \|$")
HIDDEN_FILE = re.compile(r"^tests/test_hidden_[a-z0-9_]+\.py$")
# Like the verify sandbox: no third-party plugins, no bytecode left behind.
PYTEST_ENV = {
    **{k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTHONPATH")},
    "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
}


def build_pack(out: Path) -> str:
    """Build the pack into *out* the way `make pack30` does; return the builder's output."""
    result = subprocess.run(
        [sys.executable, str(BUILDER), "--src", str(PACK / "src"), "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def _tree(root: Path) -> dict[str, bytes]:
    """What the builder wrote under *root*: suite/ and patches/."""
    files = (p for p in root.rglob("*") if p.is_file())
    tree = {p.relative_to(root).as_posix(): p.read_bytes() for p in files}
    return {rel: data for rel, data in tree.items() if rel.startswith(("suite/", "patches/"))}


def _tasks(built: Path) -> list[dict[str, Any]]:
    lines = (built / "suite" / "tasks.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def readme_outcomes() -> dict[str, tuple[str, str]]:
    """``{task id: (kind, candidate outcome)}`` from the README's task table."""
    rows = {}
    for line in (PACK / "README.md").read_text(encoding="utf-8").splitlines():
        match = ROW.match(line)
        if match:
            rows[match.group(1)] = (match.group(2), match.group(3))
    return rows


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pack30")
    build_pack(out)
    return out


def test_builder_is_deterministic_and_matches_the_pin(built: Path, tmp_path: Path) -> None:
    second = tmp_path / "second"
    output = build_pack(second)
    first_tree = _tree(built)
    assert first_tree, "the builder wrote nothing"
    assert first_tree == _tree(second), "the builder is not deterministic"

    controls = yaml.safe_load((PACK / "controls.yaml").read_text(encoding="utf-8"))
    assert controls["suite"]["file"] == "suite/tasks.jsonl"
    pinned = controls["suite"]["sha256"]
    tasks = built / "suite" / "tasks.jsonl"
    digest = hashlib.sha256(tasks.read_bytes()).hexdigest()
    assert digest == pinned, (
        "examples/pack30/src no longer builds the pinned suite: restore it, or rebuild and run "
        "`.venv/bin/deltarun seal examples/pack30/controls.yaml`"
    )
    assert f"tasks.jsonl sha256 {digest}" in output
    assert len(load_suite(tasks, pinned).tasks) == 30  # every archive matches its task line


def test_controls_lock_the_three_arms(built: Path) -> None:
    shutil.copy(PACK / "controls.yaml", built / "controls.yaml")
    loaded = load_controls(built / "controls.yaml")  # parses, and every agent dir is there
    # Scored would need only the sandbox image pinned under images:, which is machine-local.
    assert scored_channel_problems(loaded.controls, set(), {}) == []
    controls = yaml.safe_load((PACK / "controls.yaml").read_text(encoding="utf-8"))
    assert controls["protocol_id"] == "pack30-2026-12"
    assert controls["channel"] == "exploratory"
    assert controls["runtime"]["max_retries"] == 0
    arms = {arm["name"]: arm for arm in controls["arms"]}
    assert list(arms) == ["frozen-stub-v1", "candidate", "gold"]
    assert arms["frozen-stub-v1"]["control"] is True
    assert arms["frozen-stub-v1"]["agent"] == {"type": "scripted", "action": "noop"}
    assert arms["candidate"]["agent"] == {"type": "patch", "dir": "patches/candidate"}
    assert arms["gold"]["agent"] == {"type": "patch", "dir": "patches/gold"}


def test_twenty_ordinary_and_ten_negative_tasks(built: Path) -> None:
    tasks = _tasks(built)
    kinds = Counter(task["kind"] for task in tasks)
    assert kinds == {"ordinary": 20, "negative": 10}
    gold = {p.name for p in (built / "patches" / "gold").iterdir()}
    for task in tasks:
        if task["kind"] == "ordinary":
            assert task["hidden_tests"], task["id"]
            assert all(HIDDEN_FILE.match(test) for test in task["hidden_tests"]), task["id"]
            assert f"{task['id']}.diff" in gold
        else:
            assert not {"hidden", "hidden_sha256", "hidden_tests"} & set(task), task["id"]
            assert f"{task['id']}.abstain" in gold


def test_readme_table_and_counts_match_the_pack(built: Path) -> None:
    rows = readme_outcomes()
    assert {task["id"]: task["kind"] for task in _tasks(built)} == {
        task_id: kind for task_id, (kind, _) in rows.items()
    }
    counts = Counter(outcome for _, outcome in rows.values())
    assert 11 <= counts["success"] <= 13 and counts["false_abstain"] == 1
    assert counts["success"] + counts["miss"] + counts["false_abstain"] == 20
    assert counts["abstain_ok"] + counts["invalid_completion"] == 10
    line = (
        f"| candidate | {counts['success']} / {counts['miss']} / {counts['false_abstain']} "
        f"| {counts['abstain_ok']} / {counts['invalid_completion']} | {counts['success']}/20 |"
    )
    assert line in (PACK / "README.md").read_text(encoding="utf-8")


# --------------------------------------------------------------------------- per task


def _unpack(archive: Path, dest: Path) -> None:
    """Regular files and directories only, at relative paths (the builder writes no others)."""
    with tarfile.open(archive) as tar:
        for member in tar:
            target = dest / member.name
            assert not member.name.startswith("/") and ".." not in member.name.split("/")
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
            else:
                assert member.isfile(), member.name
                target.parent.mkdir(parents=True, exist_ok=True)
                source = tar.extractfile(member)
                assert source is not None
                target.write_bytes(source.read())


def _tree_for(built: Path, task: dict[str, Any], dest: Path, diff: Path | None) -> Path:
    """The fixture, *diff* applied with git apply, the hidden files (if any) copied over."""
    _unpack(built / "suite" / task["repo"], dest)
    if diff is not None:
        subprocess.run(["git", "init", "-q"], cwd=dest, check=True)
        applied = subprocess.run(
            ["git", "apply", "--whitespace=nowarn", str(diff)],
            cwd=dest,
            capture_output=True,
            text=True,
            check=False,
        )
        assert applied.returncode == 0, f"{diff.name} does not apply: {applied.stderr}"
        shutil.rmtree(dest / ".git")
    if "hidden" in task:
        _unpack(built / "suite" / task["hidden"], dest)
    return dest


def _pytest(tree: Path) -> tuple[int, dict[str, str]]:
    """Run every test under tests/; return the exit status and ``{module::test: outcome}``."""
    report = tree.with_suffix(".xml")
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    result = subprocess.run(
        [*command, f"--junitxml={report}", "tests"],
        cwd=tree,
        capture_output=True,
        text=True,
        env=PYTEST_ENV,
        timeout=120,
        check=False,
    )
    outcomes = {}
    for case in ET.parse(report).iter("testcase"):
        if case.find("failure") is not None:
            outcome = "failed"
        elif case.find("error") is not None:
            outcome = "error"
        elif case.find("skipped") is not None:
            outcome = "skipped"
        else:
            outcome = "passed"
        outcomes[f"{case.get('classname')}::{case.get('name')}"] = outcome
    return result.returncode, outcomes


def _split(outcomes: dict[str, str]) -> tuple[set[str], set[str]]:
    """The outcomes of the visible and of the hidden tests."""
    hidden = {v for k, v in outcomes.items() if k.startswith("tests.test_hidden_")}
    visible = {v for k, v in outcomes.items() if not k.startswith("tests.test_hidden_")}
    return visible, hidden


def check_task(built: Path, task: dict[str, Any], expected: str, scratch: Path) -> list[str]:
    """Everything one task must satisfy; the problems found, each naming the task."""
    task_id, problems = task["id"], []
    scratch.mkdir()
    candidate = built / "patches" / "candidate"
    diff, abstain = candidate / f"{task_id}.diff", candidate / f"{task_id}.abstain"

    code, outcomes = _pytest(_tree_for(built, task, scratch / "fixture", None))
    visible, hidden = _split(outcomes)
    if task["kind"] == "negative":
        if code != 0 or visible != {"passed"}:
            problems.append(f"{task_id}: visible tests do not pass on the fixture ({code})")
        if diff.is_file():
            _tree_for(built, task, scratch / "candidate", diff)  # a fabricated patch that applies
        got = "abstain_ok" if abstain.is_file() and not diff.is_file() else "invalid_completion"
        if got != expected:
            problems.append(f"{task_id}: candidate gets {got}, README says {expected}")
        return problems

    if code != 1 or visible != {"passed"} or "failed" not in hidden or "error" in hidden:
        problems.append(
            f"{task_id}: on the fixture the visible tests must pass and the hidden tests fail "
            f"(exit {code}, visible {sorted(visible)}, hidden {sorted(hidden)})"
        )
    gold = built / "patches" / "gold" / f"{task_id}.diff"
    code, outcomes = _pytest(_tree_for(built, task, scratch / "gold", gold))
    if code != 0 or set(outcomes.values()) != {"passed"}:
        problems.append(f"{task_id}: tests fail after gold.diff (exit {code})")
    if abstain.is_file():
        got = "false_abstain"
    else:
        code, outcomes = _pytest(_tree_for(built, task, scratch / "candidate", diff))
        visible, hidden = _split(outcomes)
        got = "success" if hidden == {"passed"} else "miss"
        if visible != {"passed"}:
            problems.append(f"{task_id}: the candidate's patch breaks the visible tests")
    if got != expected:
        problems.append(f"{task_id}: candidate gets {got}, README says {expected}")
    return problems


def test_every_task_on_the_host(built: Path, tmp_path: Path) -> None:
    """Hidden tests fail on each fixture and pass after gold.diff; the candidate gets the
    README's outcome. One loop over the tasks, two at a time."""
    if shutil.which("git") is None:
        pytest.fail("git is needed for git apply")
    expected = {task_id: outcome for task_id, (_, outcome) in readme_outcomes().items()}
    tasks = _tasks(built)
    with ThreadPoolExecutor(max_workers=max(2, min(4, os.cpu_count() or 1))) as pool:
        results = pool.map(
            lambda t: check_task(built, t, expected[t["id"]], tmp_path / t["id"]), tasks
        )
        problems = [problem for found in results for problem in found]
    assert not problems, "\n".join(problems)
