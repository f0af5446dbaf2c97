"""Builders for small throw-away suites used by the tests."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from runner.config.model_keys import KEYS_DIR_ENV

PY_IMAGE = "deltarun/sandbox-python:bookworm"

ADD_FIXTURE = {
    "calc/__init__.py": "def add(a, b):\n    return a - b\n",
    "tests/__init__.py": "",
    "tests/test_visible.py": "from calc import add\n\n\ndef test_zero():\n    assert add(0, 0) == 0\n",
    "README.md": "calc\n",
}
ADD_HIDDEN = {
    "tests/test_hidden.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
}
ADD_GOLD = (
    "diff --git a/calc/__init__.py b/calc/__init__.py\n"
    "--- a/calc/__init__.py\n"
    "+++ b/calc/__init__.py\n"
    "@@ -1,2 +1,2 @@\n"
    " def add(a, b):\n"
    "-    return a - b\n"
    "+    return a + b\n"
)
# The ``calc`` fixture already fixed, and the gold patch backwards on it (add() made to
# subtract): a control that passes and a candidate that breaks every task.
ADD_FIXED = {**ADD_FIXTURE, "calc/__init__.py": "def add(a, b):\n    return a + b\n"}
ADD_BREAK = (
    "diff --git a/calc/__init__.py b/calc/__init__.py\n"
    "--- a/calc/__init__.py\n"
    "+++ b/calc/__init__.py\n"
    "@@ -1,2 +1,2 @@\n"
    " def add(a, b):\n"
    "-    return a + b\n"
    "+    return a - b\n"
)
HIDDEN_TEST = "python3 -m pytest -q -p no:cacheprovider tests/test_hidden.py"


def tar_bytes(files: dict[str, str | bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, content in sorted(files.items()):
            data = content.encode() if isinstance(content, str) else content
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def write_tar(path: Path, files: dict[str, str | bytes]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(tar_bytes(files))
    return path


def repo_task(
    task_id: str,
    *,
    kind: str = "ordinary",
    timeout_s: float = 60,
    prompt: str = "Fix add().",
    hidden: bool = True,
    exit_status: bool = False,
) -> dict[str, Any]:
    """A repository task over the ``calc`` fixture; graded by its declared hidden test, or
    with ``exit_status`` by the exit status of ``HIDDEN_TEST`` alone."""
    task: dict[str, Any] = {
        "id": task_id,
        "kind": kind,
        "prompt": prompt,
        "repo": f"fixtures/{task_id}.tar",
        "image": PY_IMAGE,
        "timeout_s": timeout_s,
    }
    if hidden:
        task["hidden"] = f"hidden/{task_id}.tar"
        if exit_status:
            task["hidden_test"] = HIDDEN_TEST
        else:
            task["hidden_tests"] = ["tests/test_hidden.py"]
    return task


# ``DELTARUN_TEST_OCI_RUNTIME=runsc`` runs every suite a test makes under that OCI runtime
# (``make adversarial-gvisor``: the adversarial suite under gVisor).
RUNTIME_UNDER_TEST: dict[str, Any] = (
    {"oci_runtime": os.environ["DELTARUN_TEST_OCI_RUNTIME"]}
    if os.environ.get("DELTARUN_TEST_OCI_RUNTIME")
    else {}
)
UNDER_GVISOR = RUNTIME_UNDER_TEST.get("oci_runtime") == "runsc"


def gvisor_residual(why: str) -> pytest.MarkDecorator:
    """An adversarial row that does not hold under gVisor, named with why
    (docs/verdicts-and-sandbox.md lists them); an expected failure there only."""
    return pytest.mark.xfail(UNDER_GVISOR, reason=f"under gVisor: {why}", strict=False)


def make_suite(
    root: Path,
    tasks: list[dict[str, Any]],
    arms: list[dict[str, Any]],
    *,
    fixtures: dict[str, dict[str, str | bytes]] | None = None,
    hidden: dict[str, dict[str, str | bytes]] | None = None,
    runtime: dict[str, Any] | None = None,
    tools: dict[str, Any] | None = None,
    seal: bool = True,
    route: dict[str, Any] | None = None,
    channel: str = "exploratory",
) -> Path:
    """Write suite/tasks.jsonl, the archives and controls.yaml; return the controls path."""
    suite = root / "suite"
    for task in tasks:
        if isinstance(task.get("repo"), str):
            write_tar(suite / task["repo"], (fixtures or {}).get(task["id"], ADD_FIXTURE))
        if task.get("hidden"):
            write_tar(suite / task["hidden"], (hidden or {}).get(task["id"], ADD_HIDDEN))
    suite.mkdir(parents=True, exist_ok=True)
    (suite / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    controls = {
        "protocol_id": "test",
        "channel": channel,
        "suite": {"file": "suite/tasks.jsonl", "sha256": ""},
        "runtime": {
            "timeout_s": 60,
            "verify_timeout_s": 60,
            **RUNTIME_UNDER_TEST,
            **(runtime or {}),
        },
        "tools": tools or {"allowlist": [], "forbidden_paths": [".git/"]},
        "arms": arms,
    }
    if route is not None:
        controls["route"] = route
    path = root / "controls.yaml"
    path.write_text(yaml.safe_dump(controls, sort_keys=False))
    if seal:
        from runner.config.loader import load_controls
        from runner.suite.sealing import seal_target

        seal_target(path, load_controls)
    return path


def write_agent(root: Path, name: str, script: str) -> dict[str, Any]:
    """A `command` arm whose program is a shell script."""
    directory = root / "agents" / name
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "run.sh").write_text(script)
    return {"type": "command", "dir": f"agents/{name}", "argv": ["sh", "/opt/agent/run.sh"]}


def pin_validation(controls: Path) -> None:
    """Write a validation.json marking every task of the suite valid and pin it by sealing
    the controls: what `deltarun validate` then `seal` leave, for tests of `channel:
    scored` runs about something else (validation itself: tests/test_validate.py)."""
    from runner.config.loader import load_controls
    from runner.hashing import sha256_file
    from runner.suite.sealing import seal_target

    tasks = load_controls(controls).suite_path
    ids = [json.loads(line)["id"] for line in tasks.read_text().splitlines() if line.strip()]
    document = {
        "schema_version": 1,
        "suite_sha256": sha256_file(tasks),
        "tasks": [{"id": task_id, "verdict": "valid", "detail": ""} for task_id in ids],
    }
    (tasks.parent / "validation.json").write_text(json.dumps(document))
    seal_target(controls, load_controls)


def comparison(report: dict[str, Any]) -> dict[str, Any]:
    """report.json with the comparison's numbers where they are, published or (a withheld
    report) kept for the author under ``withheld_for_author``."""
    held = report.get("withheld_for_author") or {}
    return {**report, **{k: v for k, v in held.items() if k != "note"}}


def validate_gold(
    root: Path, tasks: list[dict[str, Any]], fixtures: dict[str, dict[str, str | bytes]]
) -> tuple[dict[str, dict[str, Any]], dict[str, Any], Any]:
    """``deltarun validate`` of ``tasks`` (their fixtures by id), ``ADD_GOLD`` as each
    task's gold patch beside a no-op control: each task's verdict entry by id, the whole
    validation.json and the command's result."""
    from tests.conftest import run_cli

    (root / "gold").mkdir()
    for task in tasks:
        (root / "gold" / f"{task['id']}.diff").write_text(ADD_GOLD)
    arms = [
        {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
        {"name": "gold", "agent": {"type": "patch", "dir": "gold"}},
    ]
    controls = make_suite(root, tasks, arms, fixtures=fixtures)
    result = run_cli("validate", str(controls), "-j", "2")
    document = json.loads((root / "suite" / "validation.json").read_text())
    return {task["id"]: task for task in document["tasks"]}, document, result


def owned_key(
    directory: Path, name: str, *upstreams: str, key: str | None = None
) -> dict[str, str]:
    """The environment of an owner who lets the key ``name`` go to ``upstreams``: a key
    directory holding ``NAME.upstream`` (runner.config.model_keys), as a user would write it,
    and the variable ``name`` set to ``key`` unless it is None."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.upstream").write_text("".join(u + "\n" for u in upstreams))
    return {KEYS_DIR_ENV: str(directory), **({name: key} if key is not None else {})}
