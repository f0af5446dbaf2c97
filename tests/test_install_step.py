"""A task's install step, on the real engine: a project whose package lives where only its
``setup.py`` says (``lib/``), installed offline with pip as the agent's uid before the
agent and again on the patched tree before the hidden tests.

With the step, the gold patch passes and the agent's patch holds none of what the install
wrote (``*.egg-info``); a step that fails is a miss naming the step, and ``validate``
calls the task ``setup-broken`` rather than blaming the task's gold patch.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.helpers import ADD_FIXTURE, ADD_GOLD, make_suite, repo_task

pytestmark = pytest.mark.docker

INSTALL = "python3 -m pip install -e . --no-deps --no-build-isolation"
LIB_FIXTURE = {
    **{k.replace("calc/", "lib/calc/"): v for k, v in ADD_FIXTURE.items()},
    "setup.py": (
        "from setuptools import setup\n\n"
        "setup(name='calc', version='0.1', packages=['calc'], package_dir={'': 'lib'})\n"
    ),
}
LIB_GOLD = ADD_GOLD.replace("calc/__init__.py", "lib/calc/__init__.py")
ARMS = [
    {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
    {"name": "gold", "agent": {"type": "patch", "dir": "gold"}},
]


def suite(tmp_path: Path) -> Path:
    tasks = [
        {**repo_task("installed"), "install": [INSTALL]},
        repo_task("not-installed"),
        {**repo_task("install-fails"), "install": [INSTALL, "python3 -c 'raise SystemExit(7)'"]},
    ]
    (tmp_path / "gold").mkdir()
    for task in tasks:
        (tmp_path / "gold" / f"{task['id']}.diff").write_text(LIB_GOLD)
    fixtures = {task["id"]: LIB_FIXTURE for task in tasks}
    return make_suite(tmp_path, tasks, ARMS, fixtures=fixtures)


def test_the_install_step_runs_in_both_sandboxes_and_a_broken_setup_is_setup_broken(
    tmp_path: Path,
) -> None:
    controls = suite(tmp_path)
    result = run_cli("validate", str(controls), "-j", "2")
    assert result.returncode == 1, result.stderr
    document = json.loads((tmp_path / "suite" / "validation.json").read_text())
    found = {t["id"]: (t["verdict"], t["detail"]) for t in document["tasks"]}
    assert found["installed"][0] == "valid", found
    assert found["not-installed"][0] == "setup-broken", found
    assert "No module named 'calc'" in found["not-installed"][1]
    assert "install step" in found["not-installed"][1]  # the fix to try names the step
    assert found["install-fails"][0] == "setup-broken", found
    assert "install step" in found["install-fails"][1]
    # The checks' records: the gold patch replayed in the agent's sandbox, then verified.
    records = {
        r["task_id"]: r
        for r in map(
            json.loads, (Path(document["run_dir"]) / "trials.jsonl").read_text().splitlines()
        )
        if r["arm"] == "gold"
    }
    installed = records["installed"]
    assert installed["outcome"] == "success", (installed["reason"], installed["verify_log"])
    assert "[deltarun] install step 1:" in installed["verify_log"]
    assert "egg-info" not in installed["patch"] and installed["patch"].count("diff --git") == 1
    failed = records["install-fails"]
    assert failed["outcome"] == "miss", failed
    assert failed["reason"].startswith("install step `python3 -c 'raise SystemExit(7)'` failed")
    assert "(exit 7)" in failed["reason"]
    # The agent's sandbox ran it too (before the agent): its failure leads the agent log.
    assert failed["agent_log"].startswith("[deltarun] in the agent's sandbox: install step")
