"""The example suite: reproducible from its sources, and every gold patch passes in Docker."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli

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


def test_builder_reproduces_the_committed_suite(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(QUICKSTART / "build_suite.py"), "--out", str(tmp_path)],
        check=True,
        capture_output=True,
    )
    built = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert built, "the builder wrote nothing"
    for rel in built:
        assert (tmp_path / rel).read_bytes() == (QUICKSTART / rel).read_bytes(), rel


@pytest.mark.docker
def test_quickstart_gold_passes_control_fails(tmp_path: Path, docker_api: Any) -> None:
    work = tmp_path / "quickstart"
    shutil.copytree(QUICKSTART, work, ignore=shutil.ignore_patterns("src"))
    result = run_cli("run", str(work / "controls.yaml"), "--out", str(tmp_path / "run"), "-j", "2")
    assert result.returncode == 0, result.stderr
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
