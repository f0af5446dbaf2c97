"""``deltarun validate``: tasks broken in each way get their verdict, on the real engine.

The classification itself (``runner.grading.validation.classify``) is pure and is checked
first on scripted checks; then one suite holds a task of every broken kind, and a
second a task flaky by design, each validated through real sandboxes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runner.grading.validation import Check, classify
from runner.hashing import sha256_file
from runner.records import RepoTask
from tests.conftest import run_cli
from tests.helpers import ADD_FIXTURE, ADD_GOLD, make_suite, repo_task

ARMS = [
    {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
    {"name": "gold", "agent": {"type": "patch", "dir": "gold"}},
]
FIXED = {**ADD_FIXTURE, "calc/__init__.py": "def add(a, b):\n    return a + b\n"}
WRONG_CONTEXT = ADD_GOLD.replace("return a - b", "return a * b")
# A src/ layout its packaging metadata declares: gold is valid without an install step.
SRC_LAYOUT = {
    **{k.replace("calc/", "src/calc/"): v for k, v in ADD_FIXTURE.items()},
    "pyproject.toml": '[tool.setuptools.packages.find]\nwhere = ["src"]\n',
}
SRC_GOLD = ADD_GOLD.replace("calc/__init__.py", "src/calc/__init__.py")
# Settings naming a plugin the image lacks; a conftest importing what the image lacks.
NEEDS_PLUGIN = {**ADD_FIXTURE, "pytest.ini": "[pytest]\naddopts = --cov=calc -p no:randomly\n"}
NEEDS_MODULE = {**ADD_FIXTURE, "conftest.py": "import not_in_the_image  # noqa\n"}
README_PATCH = (
    "diff --git a/README.md b/README.md\n--- a/README.md\n+++ b/README.md\n"
    "@@ -1 +1 @@\n-calc\n+calc, documented\n"
)
FLAKY_TEST = "import os\n\n\ndef test_coin():\n    assert os.urandom(1)[0] % 2 == 0\n"


def check(
    passed: bool, *, applied: bool = True, missing: bool = False, setup: str | None = None
) -> Check:
    return Check(passed, applied, missing, None, "note", setup)


def task(**extra: Any) -> RepoTask:
    return RepoTask.model_validate(
        {**repo_task("t"), "repo_sha256": "0" * 64, "hidden_sha256": "0" * 64, **extra}
    )


@pytest.mark.parametrize(
    "bare, gold, verdict",
    [
        ([check(False)], [check(True)], "valid"),
        ([check(True)], [check(True)], "passes-without-fix"),
        ([check(False)], [check(False)], "gold-fails"),
        ([check(False)], [check(False, applied=False)], "gold-does-not-apply"),
        ([check(False)], [check(False, missing=True)], "test-not-collected"),
        ([check(False)], [check(False, missing=True, setup="E ... -> fix")], "setup-broken"),
        ([check(False, setup="E")], None, "setup-broken"),
        ([check(False), check(False)], [check(True), check(False)], "flaky"),
        ([check(True), check(False)], [check(True), check(True)], "flaky"),
        ([check(False)], None, "no-gold"),
        ([check(False, missing=True)], None, "test-not-collected"),
        # A bare fixture may rightly fail to collect: the test imports what the fix adds.
        ([check(False, missing=True)], [check(True)], "valid"),
    ],
)
def test_classify(bare: list[Check], gold: list[Check] | None, verdict: str) -> None:
    assert classify(task(), bare, gold).verdict == verdict


def test_a_negative_task_with_a_hidden_test_is_not_valid() -> None:
    negative = task(kind="negative")
    assert classify(negative, [], None).verdict == "negative-has-hidden"
    bare = RepoTask.model_validate(
        {**repo_task("n", kind="negative", hidden=False), "repo_sha256": "0" * 64}
    )
    assert classify(bare, [], None).verdict == "valid"


def gold_dir(root: Path, patches: dict[str, str]) -> None:
    (root / "gold").mkdir(parents=True, exist_ok=True)
    for task_id, patch in patches.items():
        (root / "gold" / f"{task_id}.diff").write_text(patch)


@pytest.mark.docker
def test_every_broken_kind_gets_its_verdict(tmp_path: Path, docker_api: Any) -> None:
    tasks = [
        repo_task("ok"),
        repo_task("already-fixed"),
        repo_task("gold-wrong"),
        repo_task("gold-stale"),
        repo_task("test-missing"),  # its hidden file holds no test
        {
            **repo_task("cmd-missing", exit_status=True),
            "hidden_test": "python3 -m pytest -q tests/test_hidden.py -k nomatch",
        },
        repo_task("no-gold"),
        repo_task("neg", kind="negative", hidden=False),
        repo_task("src-layout"),
        repo_task("needs-plugin"),
        repo_task("needs-module"),
    ]
    gold_dir(
        tmp_path,
        {
            "ok": ADD_GOLD,
            "already-fixed": README_PATCH,
            "gold-wrong": README_PATCH,
            "gold-stale": WRONG_CONTEXT,
            "test-missing": ADD_GOLD,
            "cmd-missing": ADD_GOLD,
            "src-layout": SRC_GOLD,
            "needs-plugin": ADD_GOLD,
            "needs-module": ADD_GOLD,
        },
    )
    # (A test file that does not exist at all is refused by seal: test_cli_errors.)
    controls = make_suite(
        tmp_path,
        tasks,
        ARMS,
        fixtures={
            "already-fixed": FIXED,
            "src-layout": SRC_LAYOUT,
            "needs-plugin": NEEDS_PLUGIN,
            "needs-module": NEEDS_MODULE,
        },
        hidden={"test-missing": {"tests/test_hidden.py": "VALUE = 1\n"}},
    )
    result = run_cli("validate", str(controls), "-j", "2")
    assert result.returncode == 1, result.stderr
    document = json.loads((tmp_path / "suite" / "validation.json").read_text())
    verdicts = {t["id"]: t["verdict"] for t in document["tasks"]}
    assert verdicts == {
        "ok": "valid",
        "already-fixed": "passes-without-fix",
        "gold-wrong": "gold-fails",
        "gold-stale": "gold-does-not-apply",
        "test-missing": "test-not-collected",
        "cmd-missing": "test-not-collected",
        "no-gold": "no-gold",
        "neg": "valid",
        "src-layout": "valid",
        "needs-plugin": "setup-broken",
        "needs-module": "setup-broken",
    }, document
    details = {t["id"]: t["detail"] for t in document["tasks"]}
    assert "unrecognized arguments: --cov=calc" in details["needs-plugin"], details
    assert "add pytest-cov to the environment" in details["needs-plugin"]
    assert "No module named 'not_in_the_image'" in details["needs-module"], details
    assert document["suite_sha256"] == sha256_file(tmp_path / "suite" / "tasks.jsonl")
    assert sha256_file(tmp_path / "suite" / "validation.json") in result.stderr
    lines = [line for line in result.stderr.splitlines() if "not valid" in line]
    assert lines == [lines[0]] and "8 of 11 tasks are not valid" in lines[0], result.stderr
    table = {line.split()[0]: line.split()[1] for line in result.stdout.splitlines()}
    assert table == verdicts


@pytest.mark.docker
def test_a_flaky_task_is_found_with_repeats(tmp_path: Path, docker_api: Any) -> None:
    """A hidden test that passes on a coin flip: 6 runs a side make a mixed side all but
    certain (each side all alike: 1 in 32; both: 1 in 1024)."""
    gold_dir(tmp_path, {"coin": ADD_GOLD})
    controls = make_suite(
        tmp_path, [repo_task("coin")], ARMS, hidden={"coin": {"tests/test_hidden.py": FLAKY_TEST}}
    )
    result = run_cli("validate", str(controls), "-n", "6", "-j", "2")
    assert result.returncode == 1, result.stderr
    document = json.loads((tmp_path / "suite" / "validation.json").read_text())
    (only,) = document["tasks"]
    assert only["verdict"] == "flaky", only
    assert len(only["bare"]) == 6 and len(only["gold"]) == 6


@pytest.mark.docker
def test_init_writes_a_suite_that_validates_and_runs(tmp_path: Path, docker_api: Any) -> None:
    """`deltarun init` → validate → run, as README's "Write your own suite" walks it."""
    root = tmp_path / "mine"
    made = run_cli("init", str(root))
    assert made.returncode == 0, made.stderr
    assert "warning" not in made.stderr, made.stderr
    controls = root / "controls.yaml"
    checked = run_cli("validate", str(controls))
    assert checked.returncode == 0, checked.stderr
    table = {line.split()[0]: line.split()[1] for line in checked.stdout.splitlines()}
    assert table == {"fix-add": "valid", "neg-missing-spec": "valid", "answer-sum": "not-checked"}
    ran = run_cli("run", str(controls), "--out", str(tmp_path / "run"))
    assert ran.returncode == 0, ran.stderr
    records = [json.loads(x) for x in (tmp_path / "run" / "trials.jsonl").read_text().splitlines()]
    outcomes = {(r["task_id"], r["arm"]): r["outcome"] for r in records}
    assert outcomes[("fix-add", "gold")] == "success"
    assert outcomes[("fix-add", "control")] == "miss"
    assert outcomes[("neg-missing-spec", "gold")] == "abstain_ok"
    assert outcomes[("answer-sum", "gold")] == "success"
    assert {r["error"] for r in records} == {None}


@pytest.mark.docker
def test_validate_runs_its_checks_on_celery_workers(
    tmp_path: Path, docker_api: Any, redis_server: Any
) -> None:
    """--broker: the same verdicts, with every check recorded by a real worker."""
    from tests.distributed_support import start_worker

    gold_dir(tmp_path, {"ok": ADD_GOLD, "already-fixed": README_PATCH})
    controls = make_suite(
        tmp_path, [repo_task("ok"), repo_task("already-fixed")], ARMS,
        fixtures={"already-fixed": FIXED},
    )  # fmt: skip
    worker = start_worker(redis_server, tmp_path / "worker.log", "-c", "2")
    try:
        result = run_cli("validate", str(controls), "--broker", redis_server.url)
    finally:
        worker.stop()
    assert result.returncode == 1, result.stderr
    document = json.loads((tmp_path / "suite" / "validation.json").read_text())
    assert {t["id"]: t["verdict"] for t in document["tasks"]} == {
        "ok": "valid",
        "already-fixed": "passes-without-fix",
    }
    records = [
        json.loads(line)
        for line in (Path(document["run_dir"]) / "trials.jsonl").read_text().splitlines()
    ]
    assert len(records) == 4 and {r["worker"] for r in records} == {"w1"}


def test_a_refused_option_names_its_plugin_and_the_fix() -> None:
    from runner.setup_signals import setup_failure

    log = "ERROR: usage: ...\nrun_pytest.py: error: unrecognized arguments: --cov=x -n 4\n"
    found = setup_failure("the test process ended (exit 4) before pytest reported", log)
    assert found is not None
    assert "--cov=x (pytest-cov) -n (pytest-xdist) 4" in found
    assert "add pytest-cov and pytest-xdist to the environment" in found
    # Tests that ran and failed are not a setup problem, whatever the log says.
    assert setup_failure("1 test(s) failed or errored, first t", log) is None
