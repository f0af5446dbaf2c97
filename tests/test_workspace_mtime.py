"""Workspace files carry a fixed, valid timestamp (issue 38, item 4): every file and
folder a sandbox gets from a fixture is dated 2000-01-01 00:00:00 UTC, which packaging
tools accept (a ZIP entry cannot be dated before 1980, so a flit or setuptools editable
install refused mtime 0), the same bytes for the same fixture; archives written into a
suite keep mtime 0, so no suite digest changes."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

import pytest

from runner.records import Outcome
from runner.trees.archives import SANDBOX_MTIME, Entry, Member, build_tar, owned_tar
from runner.trees.cache import CacheDir
from runner.trees.staging import Staging
from tests.helpers import ADD_FIXTURE, make_suite, repo_task, write_agent
from tests.test_trial_docker import run_one

MEMBERS = [
    Member("pkg", True, b"", True),
    Member("pkg/__init__.py", False, b"x = 1\n", False),
    Member("tests/test_a.py", False, b"def test_a():\n    pass\n", False),
]
# What both sandboxes check: the fixture's files and folders (and, in the verify
# sandbox, the hidden files) carry SANDBOX_MTIME, and zipfile dates them.
CHECK = f"""
import os, sys, zipfile
paths = sys.argv[1:]
bad = [p for p in paths if int(os.stat(p).st_mtime) != {SANDBOX_MTIME}]
for p in paths:
    if os.path.isfile(p):
        zipfile.ZipInfo.from_file(p)  # ValueError before 1980
print("mtimes:", bad or "ok")
sys.exit(1 if bad else 0)
"""
FIXTURE_PATHS = "README.md calc calc/__init__.py tests tests/test_visible.py"
AGENT = f"""
cat > /tmp/check.py <<'PY'
{CHECK}
PY
python3 /tmp/check.py {FIXTURE_PATHS} > agent-saw.txt 2>&1 || true
"""


def test_the_workspace_tar_dates_every_entry_and_is_deterministic(tmp_path: Path) -> None:
    staging = Staging(CacheDir(tmp_path / "cache"))
    tar = staging.workspace("tar:x", lambda: list(MEMBERS), ())
    with tarfile.open(tar) as archive:
        assert {m.name: m.mtime for m in archive.getmembers()} == {
            "pkg": SANDBOX_MTIME,
            "pkg/__init__.py": SANDBOX_MTIME,
            "tests": SANDBOX_MTIME,
            "tests/test_a.py": SANDBOX_MTIME,
        }
    again = Staging(CacheDir(tmp_path / "other")).workspace("tar:x", lambda: list(MEMBERS), ())
    assert again.read_bytes() == tar.read_bytes()
    # The harness's own copies (hidden files, planted canaries) are dated alike.
    owned = owned_tar([Entry("h", None, 0, 0o755), Entry("h/t.py", b"", 0, 0o444)])
    with tarfile.open(fileobj=io.BytesIO(owned)) as archive:
        assert {m.mtime for m in archive.getmembers()} == {SANDBOX_MTIME}
    # What a suite holds keeps mtime 0: the same bytes as before, so the same digests.
    with tarfile.open(fileobj=io.BytesIO(build_tar(MEMBERS, uid=0, gid=0))) as archive:
        assert {m.mtime for m in archive.getmembers()} == {0}


@pytest.mark.docker
@pytest.mark.parametrize("workspaces", ["auto", "copy"])
def test_both_sandboxes_see_the_fixed_date(
    tmp_path: Path, docker_api: Any, monkeypatch: pytest.MonkeyPatch, workspaces: str
) -> None:
    """The agent's sandbox (a copy-free view where this process may mount, else a copy)
    and the verify sandbox: each fixture file and folder, and each hidden file, has the
    fixed date and zipfile takes it."""
    monkeypatch.setenv("DELTARUN_WORKSPACES", workspaces)
    task = {
        **repo_task("t1", exit_status=True),
        "hidden_test": (
            f"cat agent-saw.txt && grep -qx 'mtimes: ok' agent-saw.txt && "
            f"python3 check.py {FIXTURE_PATHS} check.py"
        ),
    }
    arms = [{"name": "probe", "control": True, "agent": write_agent(tmp_path, "probe", AGENT)}]
    controls = make_suite(
        tmp_path, [task], arms, fixtures={"t1": ADD_FIXTURE}, hidden={"t1": {"check.py": CHECK}}
    )
    trial = run_one(docker_api, controls, "t1", "probe")
    assert trial.error is None, trial.error
    assert "mtimes: ok" in trial.verify_log, (trial.verify_log, trial.reason)
    assert trial.outcome == Outcome.SUCCESS, (trial.reason, trial.verify_log)
