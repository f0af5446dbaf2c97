"""The example suite: reproducible from its sources, and every gold patch passes in Docker.

``examples/quickstart/suite/`` and ``patches/`` are built from ``src/`` and not
committed; the tests build what they need (``make test`` runs pytest directly).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from runner.suite.load import load_suite
from tests.conftest import path_lock, run_cli

QUICKSTART = Path(__file__).resolve().parents[1] / "examples" / "quickstart"

CANDIDATE = {
    "slugify-accents": "success",
    "lru-get-recency": "success",
    "roman-strict-parse": "success",
    "daterange-inclusive-end": "success",
    "wrap-long-words": "success",
    "glob-doublestar": "success",
    "semver-prerelease-order": "miss",
    "money-half-up": "miss",
    "template-filters": "miss",
    "retry-backoff-cap": "false_abstain",
    "neg-csv-mapping-missing": "invalid_completion",
    "neg-ini-attached-spec": "invalid_completion",
    "neg-units-vendor-table": "abstain_ok",
    "answer-log-error-count": "success",
    "answer-semver-sort": "miss",
    "answer-neg-invoice-total": "abstain_ok",
}


def build_quickstart(out: Path | None = None) -> None:
    """Run build_suite.py into *out*, or next to the sources (as `make examples` does)."""
    command = [sys.executable, str(QUICKSTART / "build_suite.py")]
    if out is not None:
        command += ["--out", str(out)]
    with path_lock("examples-quickstart"):  # tests/test_examples_openai.py builds it too
        result = subprocess.run(command, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="module")
def built_quickstart() -> Path:
    """examples/quickstart with suite/ and patches/ built (a fresh clone has neither)."""
    build_quickstart()
    for rel in ("suite/tasks.jsonl", "patches/gold", "patches/candidate"):
        assert (QUICKSTART / rel).exists(), rel
    return QUICKSTART


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_builder_output_matches_the_pinned_suite_digest(tmp_path: Path) -> None:
    """The drift check: a fresh build, wherever it goes, is the suite controls.yaml pins."""
    first, second = tmp_path / "first", tmp_path / "second"
    build_quickstart(first)
    build_quickstart(second)
    built = _tree(first)
    assert built, "the builder wrote nothing"
    assert built == _tree(second), "the builder is not deterministic"
    assert any(rel.startswith("patches/gold/") for rel in built)
    assert any(rel.startswith("patches/candidate/") for rel in built)

    controls = yaml.safe_load((QUICKSTART / "controls.yaml").read_text(encoding="utf-8"))
    assert controls["suite"]["file"] == "suite/tasks.jsonl"
    pinned = controls["suite"]["sha256"]
    tasks = first / "suite" / "tasks.jsonl"
    assert hashlib.sha256(tasks.read_bytes()).hexdigest() == pinned, (
        "examples/quickstart/src no longer builds the pinned suite: restore it, or update "
        "suite.sha256 in examples/quickstart/controls.yaml and examples/openai/*.yaml"
    )
    assert len(load_suite(tasks, pinned).tasks) == 16  # every archive matches its task line


@pytest.mark.docker
def test_quickstart_gold_passes_control_fails(
    tmp_path: Path, docker_api: Any, built_quickstart: Path
) -> None:
    work = tmp_path / "quickstart"
    shutil.copytree(built_quickstart, work, ignore=shutil.ignore_patterns("src"))
    # The recorded candidate produced nothing for template-filters: without --allow-missing
    # the run stops before any trial and names it; with it, the report names it.
    stopped = run_cli("run", str(work / "controls.yaml"), "--out", str(tmp_path / "no"))
    assert stopped.returncode == 1 and "1 task(s): template-filters" in stopped.stderr
    assert not (tmp_path / "no").exists()
    result = run_cli(
        "run", str(work / "controls.yaml"), "--out", str(tmp_path / "run"), "-j", "2",
        "--allow-missing",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report_md = (tmp_path / "run" / "report.md").read_text()
    assert "- arm candidate: no recorded output for 1 task(s): template-filters" in report_md
    assert "setup warning: no recorded output (candidate on template-filters)" in result.stderr
    records = [
        json.loads(line) for line in (tmp_path / "run" / "trials.jsonl").read_text().splitlines()
    ]
    assert len(records) == 48 and not [r for r in records if r["error"]]
    by_arm: dict[str, dict[str, str]] = {}
    for r in records:
        by_arm.setdefault(r["arm"], {})[r["task_id"]] = r["outcome"]
    kinds = {r["task_id"]: r["task_kind"] for r in records}
    for task, outcome in by_arm["gold"].items():
        assert outcome == ("success" if kinds[task] == "ordinary" else "abstain_ok"), task
    for task, outcome in by_arm["frozen-stub-v1"].items():
        assert outcome == ("miss" if kinds[task] == "ordinary" else "invalid_completion"), task
    assert by_arm["candidate"] == CANDIDATE
    assert "candidate vs frozen-stub-v1: +58.3 pp" in result.stdout
