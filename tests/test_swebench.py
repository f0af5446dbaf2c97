"""SWE-bench-format suites: instances and predictions parsed, imported from local clones,
run with predictions as arms (real Docker), validated with the gold patches.

The dataset is examples/swebench's: a real Python project (textkit) turned into a
git repository with one injected bug per instance, real pytest files, and two
predictions files whose resolved sets are known.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from runner.errors import UserError
from runner.swebench.instances import parse_instances
from runner.swebench.predictions import parse_predictions
from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]


def _builder() -> Any:
    path = ROOT / "examples" / "swebench" / "build_dataset.py"
    spec = importlib.util.spec_from_file_location("swebench_build_dataset", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    built: dict[str, Path] = _builder().build(tmp_path_factory.mktemp("swebench") / "data")
    return built


def import_args(data: dict[str, Path], out: Path, *extra: str) -> list[str]:
    return [
        "import",
        "swebench",
        str(data["instances"]),
        "--repos",
        str(data["repos"]),
        "--out",
        str(out),
        *extra,
    ]


def tasks_of(suite: Path) -> dict[str, dict[str, Any]]:
    lines = (suite / "suite" / "tasks.jsonl").read_text().splitlines()
    return {row["id"]: row for row in map(json.loads, lines)}


ROW = {
    "instance_id": "o__r-1",
    "repo": "o/r",
    "base_commit": "a" * 40,
    "patch": "",
    "test_patch": "",
    "problem_statement": "p",
    "FAIL_TO_PASS": '["tests/test_a.py::test_x[1]"]',
    "PASS_TO_PASS": ["tests/test_a.py::T::test_y"],
}


def test_instances_read_both_test_list_forms_and_json_arrays() -> None:
    jsonl = parse_instances(json.dumps(ROW) + "\n", "i.jsonl")
    array = parse_instances(json.dumps([ROW]), "i.json")
    assert jsonl == array
    assert jsonl[0].tests == ("tests/test_a.py::test_x[1]", "tests/test_a.py::T::test_y")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"base_commit": None}, r"i\.jsonl:2: field 'base_commit' is missing"),
        ({"FAIL_TO_PASS": "not json"}, r"i\.jsonl:2: FAIL_TO_PASS: not a JSON list"),
        ({"FAIL_TO_PASS": "[]"}, r"i\.jsonl:2: FAIL_TO_PASS is empty"),
        ({"repo": "just-a-name"}, r"i\.jsonl:2: repo 'just-a-name' must be owner/name"),
        ({"instance_id": "o__r-0"}, r"i\.jsonl:2: instance_id 'o__r-0' repeats i\.jsonl:1"),
    ],
)
def test_a_bad_instance_names_the_file_the_line_and_the_field(
    change: dict[str, Any], message: str
) -> None:
    first = {**ROW, "instance_id": "o__r-0"}
    second = {k: v for k, v in {**ROW, **change}.items() if v is not None}
    with pytest.raises(UserError, match=message):
        parse_instances(json.dumps(first) + "\n" + json.dumps(second) + "\n", "i.jsonl")


def test_predictions_missing_is_no_patch_unknown_and_repeated_ids_are_errors() -> None:
    known = {"a-1", "a-2"}
    rows = [
        {"instance_id": "a-1", "model_name_or_path": "m", "model_patch": "diff"},
        {"instance_id": "a-2", "model_name_or_path": "m", "model_patch": None},
    ]
    found = parse_predictions("\n".join(map(json.dumps, rows)), "p.jsonl", known)
    assert found.patches == {"a-1": "diff", "a-2": ""} and found.model == "m"
    mapping = parse_predictions(json.dumps({"a-1": rows[0]}), "p.json", known)
    assert mapping.patches == {"a-1": "diff"}
    with pytest.raises(UserError, match=r"p\.jsonl:2: instance_id 'b-9' is not an instance"):
        parse_predictions(
            json.dumps(rows[0]) + "\n" + json.dumps({"instance_id": "b-9"}), "p.jsonl", known
        )
    with pytest.raises(UserError, match=r"p\.jsonl:2: a second prediction for 'a-1'"):
        parse_predictions(json.dumps(rows[0]) + "\n" + json.dumps(rows[0]), "p.jsonl", known)


def test_the_import_is_the_tree_the_test_files_and_the_declared_tests(
    dataset: dict[str, Path], tmp_path: Path
) -> None:
    result = run_cli(*import_args(dataset, tmp_path / "s", "--negatives", "1"))
    assert result.returncode == 0, result.stderr
    tasks = tasks_of(tmp_path / "s")
    assert sorted(tasks) == [
        "textkit-1",
        "textkit-1.negative",
        "textkit-2",
        "textkit-3",
        "textkit-4",
    ]
    two = tasks["textkit-2"]
    assert two["hidden_tests"] == [
        "tests/test_numbers.py::test_teens[11]",
        "tests/test_numbers.py::test_teens[12]",
        "tests/test_numbers.py::test_teens[13]",
        "tests/test_numbers.py::test_ordinals_basic",
        "tests/test_numbers.py::test_twenties",
        "tests/test_numbers.py::test_parse_int",
    ]
    instance = {
        row["instance_id"]: row
        for row in map(json.loads, dataset["instances"].read_text().splitlines())
    }["textkit-2"]
    # The fixture is exactly the base commit's tree (without history).
    repo = dataset["repos"] / "acme__textkit"
    base_tree = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", f"{instance['base_commit']}^{{tree}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert two["repo_tree"] == base_tree
    # The hidden file is the test file after test_patch: the dropped test is back.
    with tarfile.open(tmp_path / "s" / "suite" / two["hidden"]) as archive:
        names = [m.name for m in archive.getmembers() if m.isfile()]
        handle = archive.extractfile("tests/test_numbers.py")
        assert handle is not None
        hidden = handle.read().decode()
    assert names == ["tests/test_numbers.py"]
    assert "def test_teens(n):" in hidden
    negative = tasks["textkit-1.negative"]
    assert negative["kind"] == "negative" and "generated" in negative["tags"]
    assert (tmp_path / "s" / "gold" / "textkit-2.diff").read_text() == instance["patch"]


def test_the_same_inputs_give_the_same_suite_digest(
    dataset: dict[str, Path], tmp_path: Path
) -> None:
    digests = []
    for name in ("one", "two"):
        result = run_cli(*import_args(dataset, tmp_path / name, "--negatives", "2"))
        assert result.returncode == 0, result.stderr
        digests.append(result.stderr.split("suite sha256 ")[1].split()[0])
        assert (tmp_path / name / "suite" / "repos" / "acme__textkit.bundle").is_file()
    assert digests[0] == digests[1]
    one, two = (tmp_path / n / "suite" / "repos" / "acme__textkit.bundle" for n in ("one", "two"))
    assert one.read_bytes() == two.read_bytes()


def test_a_missing_repository_or_commit_is_one_line(
    dataset: dict[str, Path], tmp_path: Path
) -> None:
    rows = [json.loads(line) for line in dataset["instances"].read_text().splitlines()]
    rows[1]["base_commit"] = "0123456789abcdef0123456789abcdef01234567"
    broken = tmp_path / "broken.jsonl"
    broken.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = run_cli(*import_args({**dataset, "instances": broken}, tmp_path / "s"))
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("deltarun: ")]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "instance 'textkit-2': commit 0123456789abcdef" in result.stderr
    assert "acme/textkit" in result.stderr
    assert not (tmp_path / "s").exists(), "a failed import writes nothing"
    result = run_cli(*import_args({**dataset, "repos": tmp_path}, tmp_path / "s"))
    assert result.returncode == 1 and "repository acme/textkit not found under" in result.stderr


def test_an_unknown_instance_in_predictions_names_the_file_and_line(
    dataset: dict[str, Path], tmp_path: Path
) -> None:
    preds = tmp_path / "preds.jsonl"
    preds.write_text(
        json.dumps({"instance_id": "textkit-1", "model_patch": ""})
        + "\n"
        + json.dumps({"instance_id": "textkit-99", "model_patch": ""})
        + "\n"
    )
    result = run_cli(*import_args(dataset, tmp_path / "s", "--predictions", f"m={preds}"))
    assert result.returncode == 1
    assert f"{preds}:2: instance_id 'textkit-99' is not an instance" in result.stderr


def test_the_task_directory_layout_imports_like_the_jsonl(
    dataset: dict[str, Path], tmp_path: Path
) -> None:
    import yaml

    for line in dataset["instances"].read_text().splitlines():
        row = json.loads(line)
        folder = tmp_path / "layout" / "tasks" / row["instance_id"]
        folder.mkdir(parents=True)
        spec = {k: row[k] for k in ("repo", "base_commit", "version", "created_at")}
        (folder / "task.yaml").write_text(yaml.safe_dump(spec))
        (folder / "tests.json").write_text(
            json.dumps({k: json.loads(row[k]) for k in ("FAIL_TO_PASS", "PASS_TO_PASS")})
        )
        (folder / "problem_statement.md").write_text(row["problem_statement"])
        (folder / "gold.patch").write_text(row["patch"])
        (folder / "test.patch").write_text(row["test_patch"])
    from_jsonl = run_cli(*import_args(dataset, tmp_path / "a"))
    from_layout = run_cli(
        *import_args({**dataset, "instances": tmp_path / "layout"}, tmp_path / "b")
    )
    assert from_jsonl.returncode == 0 and from_layout.returncode == 0, from_layout.stderr
    assert tasks_of(tmp_path / "a") == tasks_of(tmp_path / "b")


def test_predictions_as_arms_resolve_exactly_the_expected_instances(
    dataset: dict[str, Path], tmp_path: Path, docker_api: object
) -> None:
    """model-a resolves textkit-1 and -2; model-b also -3, and its -4 patch fixes the
    FAIL_TO_PASS test but breaks a PASS_TO_PASS one, so -4 is not resolved. (The gold
    patches resolving every instance and no change resolving none: the next test.)"""
    suite = tmp_path / "s"
    made = run_cli(
        *import_args(
            dataset,
            suite,
            "--predictions",
            f"model-a={dataset['model-a']}",
            "--predictions",
            f"model-b={dataset['model-b']}",
            "--timeout",
            "120",
        )
    )
    assert made.returncode == 0, made.stderr
    run = run_cli("run", str(suite / "controls.yaml"), "--out", str(tmp_path / "run"), "-j", "2")
    assert run.returncode == 0, run.stderr
    records = [json.loads(x) for x in (tmp_path / "run" / "trials.jsonl").read_text().splitlines()]
    resolved = {
        arm: sorted(r["task_id"] for r in records if r["arm"] == arm and r["outcome"] == "success")
        for arm in ("model-a", "model-b")
    }
    assert resolved == {
        "model-a": ["textkit-1", "textkit-2"],
        "model-b": ["textkit-1", "textkit-2", "textkit-3"],
    }
    four = next(r for r in records if r["arm"] == "model-b" and r["task_id"] == "textkit-4")
    assert four["outcome"] == "miss"
    assert "test_long_words_stay_whole" in (four.get("reason") or "")
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    delta = report["deltas"][0]
    assert (delta["candidate_arm"], delta["control_arm"]) == ("model-b", "model-a")
    assert (delta["aggregate_delta"]["helped"], delta["aggregate_delta"]["hurt"]) == (1, 0)


def test_import_with_validate_excludes_the_instances_that_are_not_valid(
    dataset: dict[str, Path], tmp_path: Path, docker_api: object
) -> None:
    """textkit-4's gold patch replaced by one that breaks a PASS_TO_PASS test: the import
    validates (the gold patch resolves each other instance, no patch resolves none),
    excludes textkit-4 with its reason, and seals the suite with the validation."""
    import yaml

    rows = [json.loads(line) for line in dataset["instances"].read_text().splitlines()]
    broken = json.loads(dataset["model-b"].read_text().splitlines()[3])
    assert broken["instance_id"] == "textkit-4"
    rows[3]["patch"] = broken["model_patch"]
    instances = tmp_path / "instances.jsonl"
    instances.write_text("".join(json.dumps(r) + "\n" for r in rows))
    made = run_cli(
        *import_args({**dataset, "instances": instances}, tmp_path / "s", "--validate", "1")
    )
    assert made.returncode == 0, made.stderr
    assert "excluded textkit-4: gold-fails" in made.stderr
    controls = yaml.safe_load((tmp_path / "s" / "controls.yaml").read_text())
    assert controls["suite"]["exclude"] == ["textkit-4"]
    verdicts = json.loads((tmp_path / "s" / "suite" / "validation.json").read_text())["tasks"]
    assert {v["id"]: v["verdict"] for v in verdicts} == {
        "textkit-1": "valid",
        "textkit-2": "valid",
        "textkit-3": "valid",
        "textkit-4": "gold-fails",
    }
    assert controls["suite"]["validation"], "the seal pins the validation"


def test_a_dockerfile_template_makes_one_environment_per_repo_and_version(
    dataset: dict[str, Path], tmp_path: Path
) -> None:
    template_dir = tmp_path / "env"
    template_dir.mkdir()
    template = template_dir / "Dockerfile"
    template.write_text("ARG BASE\nFROM ${BASE}\nLABEL repo={{repo}} version={{version}}\n")
    (template_dir / "wheels").mkdir()
    (template_dir / "wheels" / "README").write_text("a wheelhouse")
    made = run_cli(*import_args(dataset, tmp_path / "s", "--dockerfile-template", str(template)))
    assert made.returncode == 0, made.stderr
    assert "deltarun build" in made.stderr, "environments are built (and sealed) first"
    tasks = tasks_of(tmp_path / "s")
    assert {t["environment"] for t in tasks.values()} == {"acme__textkit-1.0"}
    context = tmp_path / "s" / "suite" / "environments" / "acme__textkit-1.0"
    assert (context / "Dockerfile").read_text().endswith("LABEL repo=acme/textkit version=1.0\n")
    assert (context / "wheels" / "README").read_text() == "a wheelhouse"
