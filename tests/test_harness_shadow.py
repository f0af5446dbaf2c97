"""A project that ships its own copy of what the harness's pytest runs on (pytest itself, as
SWE-bench's ``pytest-dev/pytest`` instances are, or pluggy, iniconfig, ...) cannot be graded
with it: the harness imports the image's pytest before any code of the workspace, so the
project's copy is never what runs, and the tests would grade the image's code instead. The
harness says so and runs no test; ``validate`` gives ``setup-broken`` with the reason.

On the real engine, with the sandbox image's own pytest.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import ADD_FIXTURE, repo_task, validate_gold

pytestmark = pytest.mark.docker

# pytest's own package, in a src/ layout the packaging metadata declares, installed by the
# task's install step (an editable install into the user site), as pytest's repository is.
PYTEST_ITSELF = {
    **ADD_FIXTURE,
    "src/_pytest/__init__.py": "VERSION = 'the workspace copy'\n",
    "pyproject.toml": (
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n\n'
        '[project]\nname = "not-pytest"\nversion = "1.0"\n\n'
        '[tool.setuptools]\npackage-dir = {"" = "src"}\npackages = ["_pytest"]\n'
    ),
}
# A package of pytest's own dependencies at the repository's root (on the import path).
PLUGGY_AT_ROOT = {**ADD_FIXTURE, "pluggy/__init__.py": "raise SystemExit('never imported')\n"}
# A folder of the same name without __init__.py is no package, and a single module (a
# vendored copy, as projects ship six.py) is the image's twin: neither stops the grading.
PLUGGY_FOLDER = {
    **ADD_FIXTURE,
    "pluggy/notes.txt": "not a package\n",
    "iniconfig.py": "raise SystemExit('never imported')\n",
}


def test_a_project_that_ships_the_harness_pytest_cannot_be_graded(
    tmp_path: Path, docker_api: object
) -> None:
    fixtures = {"pytest-src": PYTEST_ITSELF, "pluggy-root": PLUGGY_AT_ROOT, "folder": PLUGGY_FOLDER}
    tasks = [repo_task(name) for name in fixtures]
    tasks[0]["install"] = ["python3 -m pip install -e . --no-deps"]
    verdicts, document, result = validate_gold(tmp_path, tasks, fixtures)
    for name, module in (("pytest-src", "_pytest"), ("pluggy-root", "pluggy")):
        found = verdicts[name]
        assert found["verdict"] == "setup-broken", (name, found, result.stderr)
        assert f"the project ships its own {module}" in found["detail"], found
        assert "cannot be graded" in found["detail"], found
    assert verdicts["folder"]["verdict"] == "valid", (verdicts["folder"], result.stderr)
    records = [
        json.loads(line)
        for line in (Path(document["run_dir"]) / "trials.jsonl").read_text().splitlines()
    ]
    for record in records:
        if record["task_id"] != "folder":
            assert record["outcome"] == "miss", record
            assert "the project ships its own" in record["verify_log"], record["verify_log"]
