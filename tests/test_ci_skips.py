"""In CI (``CI=true``) a skipped test fails: ``.ci/run`` installs every service and tool the
tests need, so a skip there means a part is missing (the hook in ``tests/conftest.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULE = """
import pytest

def test_needs_a_tool():
    pytest.skip("the tool is not installed")

@pytest.mark.xfail(reason="known")
def test_known_failure():
    assert False
"""


def _pytest(tmp_path: Path, ci: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_module.py").write_text(MODULE)
    env = {**os.environ, "CI": ci, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
         "-p", "tests.conftest", "--rootdir", str(tmp_path), str(tmp_path / "test_module.py")],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
    )  # fmt: skip


def test_a_skip_fails_in_ci_and_an_xfail_stays_an_xfail(tmp_path: Path) -> None:
    result = _pytest(tmp_path, "true")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 failed, 1 xfailed" in result.stdout
    assert "skipped in CI (CI=true)" in result.stdout


def test_a_skip_is_a_skip_on_a_laptop(tmp_path: Path) -> None:
    result = _pytest(tmp_path, "")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 skipped, 1 xfailed" in result.stdout
