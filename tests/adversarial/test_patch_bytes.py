"""The patch is exactly what git produced, byte for byte (class 4 of issue 10).

Agents write contents and names that a text-based reader gets wrong: bytes that
are not UTF-8, line separators other than ``\\n`` followed by fake ``diff --git``
headers, names with spaces that split ``diff --git a/X b/X`` two ways, things
that make git warn on stderr. The stored patch must be git's stdout alone,
``patch_sha256`` must match the stored bytes, the filter must read sections
as ``git apply`` does, and ``replay --reverify`` must re-grade the stored bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runner import gitpatch
from runner.config.loader import load_controls
from runner.hashing import sha256_bytes
from runner.records import Outcome, RepoTask
from runner.sandbox.docker import DockerSandboxFactory
from runner.suite.load import load_suite
from runner.trees.archives import SANDBOX_MTIME
from runner.trees.inputs import LocalInputs
from runner.trial.env import TrialEnv
from runner.trial.record import patch_of
from runner.trial.verify_phase import reverify
from tests.helpers import make_suite, repo_task, write_agent
from tests.test_trial_docker import run_one

pytestmark = pytest.mark.docker

FIX = "sed -i 's/a - b/a + b/' calc/__init__.py\n"
CASES: dict[str, tuple[str, str, bool]] = {
    # name: (what was tried, script, a tool violation expected)
    "latin-1 content": (
        "a file whose bytes are not UTF-8 (a patch stored as base64)",
        "printf 'caf\\351 \\377\\376\\n' > notes.txt\n",
        False,
    ),
    "fake headers in content": (
        "lines holding \\x85, \\r, \\x0b, \\x0c followed by 'diff --git a/conftest.py b/conftest.py'",
        "printf 'a\\302\\205diff --git a/conftest.py b/conftest.py\\nb\\rdiff --git a/x b/x\\r\\n"
        "c\\013@@ -1 +1 @@\\014\\n' > notes.txt\n",
        False,
    ),
    "spaces that split the header": (
        "a directory named 'q b' holding conftest.py, a file 'a b/c.py'",
        "mkdir -p 'q b' 'a b' && echo 'raise SystemExit(0)' > 'q b/conftest.py' && "
        "echo x > 'a b/c.py'\n",
        True,
    ),
    "warnings on stderr": (
        "an embedded repository and CRLF files that make git warn",
        "mkdir emb && git -C emb init -q && printf 'x\\r\\ny\\n' > crlf.txt\n",
        False,
    ),
}


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("patch-bytes")
    arms: list[dict[str, Any]] = [
        {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
    ]
    for index, (_, script, _) in enumerate(CASES.values()):
        arms.append({"name": f"p{index}", "agent": write_agent(root, f"p{index}", FIX + script)})
    return make_suite(root, [repo_task("t1")], arms)


@pytest.mark.parametrize("case", list(CASES))
def test_the_stored_patch_is_gits_output(
    case: str, suite: Path, docker_api: Any, held: Callable[..., None]
) -> None:
    index = list(CASES).index(case)
    tried, _, violation = CASES[case]
    trial = run_one(docker_api, suite, "t1", f"p{index}")
    stored = patch_of(trial)
    files = gitpatch.parse(stored)  # git's stdout alone: it parses end to end
    held(
        f"patch bytes: {case}",
        tried,
        f"{trial.outcome.value}, {trial.patch_encoding}, {len(files)} sections, "
        f"dropped {', '.join(trial.dropped) or 'nothing'}",
    )
    assert sha256_bytes(stored) == trial.patch_sha256
    assert trial.outcome is Outcome.SUCCESS, (trial.reason, trial.verify_log[-1500:])
    assert trial.tool_violation is violation, trial.dropped
    assert any(f.new_path == "calc/__init__.py" for f in files)
    if case == "latin-1 content":
        assert trial.patch_encoding == "base64" and b"caf\xe9" in stored
    if case == "spaces that split the header":
        assert trial.dropped == ["q b/conftest.py (test runner configuration)"]
    if case == "fake headers in content":
        assert [f.new_path for f in files] == ["calc/__init__.py", "notes.txt"]
    # What replay --reverify does: the stored bytes, graded again, give the same verdict.
    loaded = load_controls(suite)
    tasks = load_suite(loaded.suite_path, loaded.controls.suite.sha256)
    env = TrialEnv(loaded.controls, LocalInputs(tasks), DockerSandboxFactory(docker_api), "t")
    task = tasks.task("t1")
    assert isinstance(task, RepoTask)
    assert reverify(trial, task, env) is True


def test_a_change_hidden_from_the_stat_check_only_costs_the_agent(
    tmp_path: Path, docker_api: Any, held: Callable[..., None]
) -> None:
    """The harness's git treats a file whose size, mode and modification time are the
    baseline's as untouched (``core.checkStat=minimal``, so that a large workspace is
    not read whole). An agent that edits a file and puts its size and time back keeps
    the edit out of its patch; what is not in the patch is never verified, so the same
    fix that passes when left alone is a miss when hidden, never a pass."""
    hide = f"touch -d @{SANDBOX_MTIME} calc/__init__.py\n"
    controls = make_suite(
        tmp_path,
        [repo_task("t1")],
        [
            {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
            {"name": "plain", "agent": write_agent(tmp_path, "plain", FIX)},
            {"name": "hidden", "agent": write_agent(tmp_path, "hidden", FIX + hide)},
        ],
    )
    plain = run_one(docker_api, controls, "t1", "plain")
    hidden = run_one(docker_api, controls, "t1", "hidden")
    held(
        "patch bytes: edit hidden from the stat check",
        "a same-size fix, then the file's modification time set back to the copy's",
        f"hidden: {hidden.outcome.value}, patch {len(patch_of(hidden))} bytes; "
        f"the same fix left alone: {plain.outcome.value}",
    )
    assert plain.outcome is Outcome.SUCCESS, plain.reason
    assert hidden.outcome is Outcome.MISS and patch_of(hidden) == b""
