"""SWE-bench's Django and sympy instances as the field ships them, end to end on the real
engine: imported with SWE-bench's own specs (``./tests/runtests.py ...``, ``bin/test -C
--verbose``), their environments built, validated (gold resolves, the fixture as it is
misses), then run: the report's checklist row "graded by declared tests" holds.

The dataset is ``tests.fieldshapes``: Django 4.2 and sympy 1.12 from their sdists, ids
as SWE-bench's parsers write them (``test_x (module.Class)``, a docstring's first line,
bare function names).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.fieldshapes import DOCSTRING, build

pytestmark = pytest.mark.docker


def test_django_and_sympy_instances_import_validate_and_publish(tmp_path: Path) -> None:
    data = build(tmp_path / "data")
    out = tmp_path / "suite"
    rows = [json.loads(line) for line in data["instances"].read_text().splitlines()]
    predictions = tmp_path / "gold.jsonl"
    predictions.write_text(
        "".join(
            json.dumps({"instance_id": r["instance_id"], "model_patch": r["patch"]}) + "\n"
            for r in rows
        )
    )
    imported = run_cli(
        "import", "swebench", str(data["instances"]), "--repos", str(data["repos"]),
        "--out", str(out), "--specs", str(data["specs"]),
        "--predictions", f"fixed={predictions}", "--control", "no-change",
    )  # fmt: skip
    assert imported.returncode == 0, imported.stderr
    tasks = {
        t["id"]: t
        for t in map(json.loads, (out / "suite" / "tasks.jsonl").read_text().splitlines())
    }
    django = tasks["django__django-90001"]
    assert django["test_runner"] == "django"
    assert django["runner_args"] == ["--settings=test_sqlite"]
    assert set(django["hidden_tests"]) == {
        "tests/utils_tests/test_text.py::TestUtilsText::test_capfirst_sentence",  # docstring id
        "tests/utils_tests/test_text.py::TestUtilsText::test_capfirst_word",
        "tests/utils_tests/test_text.py::TestUtilsText::test_normalize_newlines",
        "tests/utils_tests/test_text.py::TestUtilsText::test_wrap",
    }, DOCSTRING
    sympy = tasks["sympy__sympy-90002"]
    assert sympy["test_runner"] == "sympy" and sympy["runner_args"] == ["-C"]
    assert set(sympy["hidden_tests"]) == {
        f"sympy/utilities/tests/test_iterables.py::{name}"
        for name in ("test_rotate", "test_flatten", "test_group")
    }
    built = run_cli("build", str(out / "controls.yaml"))
    assert built.returncode == 0, built.stderr
    validated = run_cli("validate", str(out / "controls.yaml"), "-j", "2")
    document = json.loads((out / "suite" / "validation.json").read_text())
    verdicts = {t["id"]: (t["verdict"], t["detail"]) for t in document["tasks"]}
    assert validated.returncode == 0, (validated.stderr, verdicts)
    assert all(v == "valid" for v, _ in verdicts.values()), verdicts
    # A run of the gold predictions against the fixture as it is: every instance resolved by
    # the candidate, none by the control, and the row that makes the number publishable.
    ran = run_cli("run", str(out / "controls.yaml"), "--out", str(tmp_path / "run"), "-j", "2")
    assert ran.returncode == 0, ran.stderr
    records = [json.loads(x) for x in (tmp_path / "run" / "trials.jsonl").read_text().splitlines()]
    outcomes = {(r["task_id"], r["arm"]): r["outcome"] for r in records}
    assert outcomes == {
        ("django__django-90001", "fixed"): "success",
        ("django__django-90001", "no-change"): "miss",
        ("sympy__sympy-90002", "fixed"): "success",
        ("sympy__sympy-90002", "no-change"): "miss",
    }, outcomes
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    rows_by_item = {row["item"]: row for row in report["checklist"]}
    assert rows_by_item["every repository task is graded by declared tests"]["ok"], rows_by_item
