"""`deltarun import seed000` and `deltarun import seed004`: the design documents' own formats
(a protocol YAML over answer tasks; a four-file replay kit of repository tasks) imported
into sealed deltarun suites; every field mapped or named in one line; bad input one line
and the right exit code; an imported kit run end to end on the real Docker engine.

The examples under tests/fixtures/seeds/ are built from the seeds' own snippets (see
the README there); the kit's fixture tars are made here from src/<task id>/.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from runner.config.loader import load_controls
from runner.errors import UserError
from runner.seedkits.hidden import parse_hidden_command
from runner.seedkits.seed_files import SUMMARY
from runner.suite.load import load_suite
from tests.conftest import run_cli

SEEDS = Path(__file__).resolve().parent / "fixtures" / "seeds"
SEED000 = SEEDS / "seed000"
SEED004 = SEEDS / "seed004"
IMAGE = "deltarun/sandbox-python:bookworm"


def build_kit(root: Path) -> Path:
    """The seed-004 example kit in ``root/kit``, its fixture tars made from ``src/`` the way
    the seed's author would: ``repo-017.tar`` from inside the tree, ``repo-018.tar`` with
    the tree's own folder at the top (``tar cf repo-018.tar repo-018/``)."""
    kit = root / "kit"
    shutil.copytree(SEED004 / "kit", kit)
    (kit / "fixtures").mkdir()
    with tarfile.open(kit / "fixtures" / "repo-017.tar", "w") as archive:
        for path in sorted((SEED004 / "src" / "repo-017").rglob("*")):
            archive.add(path, path.relative_to(SEED004 / "src" / "repo-017").as_posix(), False)
    with tarfile.open(kit / "fixtures" / "repo-018.tar", "w") as archive:
        archive.add(SEED004 / "src" / "repo-018" / "repo-018", "repo-018")
    return kit


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``deltarun ARGS`` in this process, through the same entry point and error handling
    as the installed command: (exit code, stdout, stderr)."""
    from runner.cli import main

    argv = sys.argv
    sys.argv = ["deltarun", *args]
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    finally:
        sys.argv = argv
    found = capsys.readouterr()
    return code, found.out, found.err


def one_line(code: int, stderr: str, expected: int, *needles: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == expected, stderr
    assert "Traceback" not in stderr
    assert len(lines) == 1, stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def tasks_of(out: Path) -> dict[str, dict[str, Any]]:
    lines = (out / "suite" / "tasks.jsonl").read_text().splitlines()
    return {row["id"]: row for row in map(json.loads, lines)}


def members(path: Path) -> set[str]:
    with tarfile.open(path) as archive:
        return {m.name for m in archive.getmembers() if m.isfile()}


# --- hidden test commands -------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "declared", "args"),
    [
        ("pytest -q tests/test_hidden.py", ("tests/test_hidden.py",), ()),
        ("python3 -m pytest -x -rA --tb short tests/t.py::test_a", ("tests/t.py::test_a",), ()),
        ("py.test -k 'not slow' -p no:cacheprovider tests/", ("tests",), ("-k", "not slow")),
        ("pytest -q", None, ()),
        ("make check", None, ()),
        ("pytest --cov=src tests/test_x.py", None, ()),
        ("pytest tests/test_*.py", None, ()),
    ],
)
def test_hidden_commands_become_declared_tests_when_plain_pytest(
    command: str, declared: tuple[str, ...] | None, args: tuple[str, ...]
) -> None:
    found = parse_hidden_command(command, "tasks.jsonl:1")
    assert found.declared == declared
    assert found.pytest_args == args
    assert (found.why == "") == (declared is not None)


def test_a_hidden_test_outside_the_repository_is_refused() -> None:
    with pytest.raises(UserError, match=re.escape("jsonl:3: hidden_test: '../t.py' is not a test")):
        parse_hidden_command("pytest ../t.py", "tasks.jsonl:3")


# --- seed 004: the replay kit ---------------------------------------------------------


def test_seed004_kit_maps_every_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kit = build_kit(tmp_path)
    out = tmp_path / "out"
    gold = f"gold={SEED004 / 'gold'}"
    code, stdout, stderr = cli(
        capsys, "import", "seed004", str(kit), "--out", str(out), "--arm", gold
    )
    assert code == 0, stderr
    assert f"next: deltarun run {out / 'controls.yaml'}" in stdout
    # Each harmless field that cannot map is one warning line.
    assert "model_name is the placeholder FROM_ENDPOINT_NOT_FROM_A_BLOG" in stderr
    assert "tool_allowlist binds deltarun's model-driven (openai) arm only" in stderr
    assert "metrics.py: not executed; deltarun's report computes the same summary" in stderr
    assert "replay.sh: not run; deltarun is the harness" in stderr
    assert "every entry sits under repo-018/" in stderr
    assert "sealed: suite sha256" in stderr

    loaded = load_controls(out / "controls.yaml")
    controls = loaded.controls
    assert controls.runtime.seed == 7 and controls.runtime.timeout_s == 180
    assert controls.runtime.max_retries == 0 and controls.route is None
    assert controls.tools.allowlist == ["read_file", "apply_patch", "run_hidden_test"]
    assert controls.tools.forbidden_paths == [".git/", "tests/test_hidden.py"]
    assert [(a.name, a.control, a.agent.type) for a in controls.arms] == [
        ("control", True, "scripted"),
        ("gold", False, "patch"),
    ]
    suite = load_suite(loaded.suite_path, controls.suite.sha256)  # sealed: digests match
    assert [t.id for t in suite.tasks] == ["repo-017", "repo-018"]

    tasks = tasks_of(out)
    first, second = tasks["repo-017"], tasks["repo-018"]
    assert first["hidden_tests"] == ["tests/test_hidden.py"] and "hidden_test" not in first
    assert first["prompt"].startswith("`textkit.slugify` leaves empty words")  # prompts/
    assert (first["timeout_s"], first["size_bucket"], first["tags"]) == (
        120,
        "sm",
        ["api", "refactor"],
    )
    assert second["hidden_tests"] == ["tests/test_hidden.py::test_balance"]
    assert "pytest_args" not in second  # -q and -p no:cacheprovider: the harness's own
    # The hidden test left the fixture (the agent can never read it) for the hidden tar.
    suite_dir = out / "suite"
    assert members(suite_dir / "hidden" / "repo-017.tar") == {"tests/test_hidden.py"}
    assert "tests/test_hidden.py" not in members(suite_dir / "fixtures" / "repo-017.tar")
    assert members(suite_dir / "fixtures" / "repo-018.tar") == {"README.md", "ledger/__init__.py"}
    assert (out / "arms" / "gold" / "repo-017.diff").is_file()


def test_seed004_model_endpoint_becomes_the_route_and_an_openai_arm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kit = build_kit(tmp_path)
    text = (kit / "controls.yaml").read_text()
    (kit / "controls.yaml").write_text(
        text.replace("FROM_ENDPOINT_NOT_FROM_A_BLOG", "qwen2.5-coder")
    )
    out = tmp_path / "out"
    code, _, stderr = cli(capsys, "import", "seed004", str(kit), "--out", str(out))
    assert code == 0, stderr
    assert "tool_allowlist binds" not in stderr and "no model route" not in stderr
    controls = load_controls(out / "controls.yaml").controls
    assert controls.route is not None
    route = controls.route.model_dump()
    assert (route["base_url"], route["model"]) == ("http://127.0.0.1:8080/v1", "qwen2.5-coder")
    assert (route["temperature"], route["max_output_tokens"]) == (0.0, 2048)
    assert [(a.name, a.agent.type) for a in controls.arms] == [
        ("control", "scripted"),
        ("qwen2.5-coder", "openai"),
    ]


def test_seed004_other_commands_stay_exit_status_tests(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kit = build_kit(tmp_path)
    lines = (
        (kit / "tasks.jsonl")
        .read_text()
        .replace(
            "pytest -q tests/test_hidden.py", "cd tests && python3 -m pytest -q test_hidden.py"
        )
    )
    (kit / "tasks.jsonl").write_text(lines)
    controls = (kit / "controls.yaml").read_text().splitlines()
    (kit / "controls.yaml").write_text(
        "\n".join(line for line in controls if not line.startswith("suite_sha256")) + "\n"
    )
    out = tmp_path / "out"
    code, _, stderr = cli(capsys, "import", "seed004", str(kit), "--out", str(out))
    assert code == 0, stderr
    assert "suite_sha256 is missing: tasks.jsonl was not pinned by the seed" in stderr
    assert "stays a command graded by its exit status (it uses the shell:" in stderr
    task = tasks_of(out)["repo-017"]
    assert task["hidden_test"] == "cd tests && python3 -m pytest -q test_hidden.py"
    assert "hidden_tests" not in task
    # The forbidden path is what moved to the hidden side.
    assert members(out / "suite" / "hidden" / "repo-017.tar") == {"tests/test_hidden.py"}


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new))


def _controls(old: str, new: str) -> Callable[[Path], None]:
    return lambda kit: _edit(kit / "controls.yaml", old, new)


def _repinned(edit: Callable[[Path], None]) -> Callable[[Path], None]:
    """``edit``, then the kit's suite_sha256 pin made right for the edited tasks.jsonl."""

    def edited(kit: Path) -> None:
        before = hashlib.sha256((kit / "tasks.jsonl").read_bytes()).hexdigest()
        edit(kit)
        after = hashlib.sha256((kit / "tasks.jsonl").read_bytes()).hexdigest()
        _edit(kit / "controls.yaml", before, after)

    return edited


def _line(old: str, new: str) -> Callable[[Path], None]:
    """Edit tasks.jsonl and keep the kit's suite_sha256 pin right."""
    return _repinned(lambda kit: _edit(kit / "tasks.jsonl", old, new))


KIT_ERRORS = [
    pytest.param(
        _controls("stop_on_control_mismatch: true", "stop_on_control_mismatch: false"),
        2,
        ("controls.yaml: stop_on_control_mismatch: false cannot map", "set it to true"),
        id="stop-on-mismatch-false",
    ),
    pytest.param(
        _controls("max_retries: 0", "max_retries: 2"),
        2,
        ("controls.yaml: max_retries 2 cannot map", "set max_retries: 0"),
        id="retries",
    ),
    pytest.param(
        _controls("  - apply_patch", "  - browse_web"),
        2,
        ("controls.yaml: tool_allowlist: 'browse_web' cannot map", "choose from read_file"),
        id="unknown-tool",
    ),
    pytest.param(
        _line('"size_bucket": "sm", "tags": ["api"', '"size_bucket": "sm", "tags": ["API"'),
        0,
        (),
        id="pin-kept-right",
    ),
    pytest.param(
        lambda kit: _edit(kit / "tasks.jsonl", '"api"', '"API"'),
        3,
        ("controls.yaml: suite_sha256: digest mismatch", "tasks.jsonl has"),
        id="suite-digest",
    ),
    pytest.param(
        _controls("per_task_timeout_s", "per_task_timout_s"),
        1,
        ("controls.yaml: per_task_timout_s: not a field", "did you mean 'per_task_timeout_s'?"),
        id="misspelt-key",
    ),
    pytest.param(
        _line('"size_bucket"', '"difficulty"'),
        1,
        ("tasks.jsonl:1: difficulty: not a field of a seed-004 task line", "size_bucket"),
        id="unknown-line-key",
    ),
    pytest.param(
        lambda kit: (kit / "prompts" / "repo-017.md").unlink(),
        1,
        ("tasks.jsonl:1: prompt: missing", "prompts/repo-017.md"),
        id="no-prompt",
    ),
    pytest.param(
        _line('tests/test_hidden.py"', 'tests/test_secret.py"'),
        1,
        ("tasks.jsonl:1: fixtures/repo-017.tar: hidden_test names tests/test_secret.py",),
        id="hidden-test-not-in-fixture",
    ),
    pytest.param(
        _line('"fixtures/repo-017.tar"', '"fixtures/repo-099.tar"'),
        1,
        ("tasks.jsonl:1: repo:", "repo-099.tar not found"),
        id="missing-fixture",
    ),
    pytest.param(
        _repinned(lambda kit: (kit / "tasks.jsonl").write_text('{"id": "x",\n')),
        1,
        ("tasks.jsonl:1: not valid JSON",),
        id="bad-json",
    ),
    pytest.param(
        _controls("seed: 7", "seed: [7"),
        1,
        ("controls.yaml: line", "not valid YAML"),
        id="bad-yaml",
    ),
]


@pytest.mark.parametrize(("edit", "code", "needles"), KIT_ERRORS)
def test_seed004_bad_input_is_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    edit: Callable[[Path], None],
    code: int,
    needles: tuple[str, ...],
) -> None:
    kit = build_kit(tmp_path)
    edit(kit)
    out = tmp_path / "out"
    found, _, stderr = cli(capsys, "import", "seed004", str(kit), "--out", str(out))
    if code == 0:
        assert found == 0, stderr
        return
    one_line(found, stderr, code, *needles)
    assert not out.exists()  # a refused import writes nothing
    assert [p.name for p in tmp_path.iterdir()] == ["kit"]


def test_seed004_arm_options_are_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kit = build_kit(tmp_path)
    base = ["import", "seed004", str(kit), "--out", str(tmp_path / "out")]
    code, _, stderr = cli(capsys, *base, "--arm", "gold")
    one_line(code, stderr, 2, "--arm 'gold': write it as NAME=DIR")
    code, _, stderr = cli(capsys, *base, "--command", "gold=python3 x.py")
    one_line(code, stderr, 2, "--command 'gold=python3 x.py'", "--arm NAME=DIR")
    code, _, stderr = cli(capsys, *base, "--control", "nobody")
    one_line(code, stderr, 2, "--control 'nobody' is not an arm")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    code, _, stderr = cli(capsys, "import", "seed004", str(kit), "--out", str(tmp_path / "full"))
    one_line(code, stderr, 1, "full: exists and is not empty")


@pytest.mark.docker
def test_seed004_kit_runs_end_to_end(tmp_path: Path, docker_api: Any) -> None:
    """The imported kit, run for real: the gold patch arm resolves both tasks, the scripted
    control neither; the ledger carries the seed's Trial fields, the report its summary."""
    kit = build_kit(tmp_path)
    out = tmp_path / "out"
    agent = tmp_path / "agent"
    shutil.copytree(SEED004 / "gold", agent)
    (agent / "apply.sh").write_text(
        'if grep -q slugify "$DELTARUN_PROMPT_FILE"; then id=repo-017; else id=repo-018; fi\n'
        'git apply "/opt/agent/$id.diff"\n'
    )
    result = run_cli(
        "import", "seed004", str(kit), "--out", str(out),
        "--arm", f"gold={SEED004 / 'gold'}",
        "--arm", f"fixer={agent}", "--command", "fixer=sh /opt/agent/apply.sh",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    run = tmp_path / "run"
    result = run_cli("run", str(out / "controls.yaml"), "--out", str(run), "-j", "6")
    assert result.returncode == 0, result.stderr
    records = [json.loads(x) for x in (run / "trials.jsonl").read_text().splitlines()]
    # Each trial's facts in the message: a run directory is gone by the time one reads it.
    facts = [
        {k: r[k] for k in ("task_id", "arm", "outcome", "reason", "agent_exit_code", "started_at")}
        | {"agent_log": r["agent_log"][-300:], "patch": r["patch"][-600:]}
        for r in records
    ]
    assert "gold vs control: +100.0 pp pass rate" in result.stdout, (result.stdout, facts)
    outcomes = {(r["task_id"], r["arm"]): r["outcome"] for r in records}
    assert outcomes == {
        ("repo-017", "control"): "miss",
        ("repo-018", "control"): "miss",
        ("repo-017", "gold"): "success",
        ("repo-018", "gold"): "success",
        ("repo-017", "fixer"): "success",
        ("repo-018", "fixer"): "success",
    }, facts
    for record in records:  # the seed's Trial fields, each one in every record
        for name in ("passed", "timeout", "tool_violation", "prompt_tokens", "wall_s"):
            assert name in record
        assert record["retries_used"] == 0
    report = json.loads((run / "report.json").read_text())
    arms = {arm["arm"]: arm for arm in report["arms"]}
    assert arms["gold"]["pass_rate"]["k"] == 2 and arms["control"]["pass_rate"]["k"] == 0
    for key in set(SUMMARY) - {"wilson95"}:  # the seed's summarize(), per arm
        assert key in arms["gold"], key
    assert arms["gold"]["pass_rate"]["wilson95"] == pytest.approx([0.34238, 1.0], abs=1e-5)


# --- seed 000: the protocol YAML over answer tasks ------------------------------------


def protocol_copy(root: Path) -> Path:
    folder = root / "seed000"
    shutil.copytree(SEED000, folder)
    return folder / "eval_protocol.yaml"


def _protocol(old: str, new: str) -> Callable[[Path], None]:
    return lambda protocol: _edit(protocol, old, new)


def _tasks(old: str, new: str) -> Callable[[Path], None]:
    return lambda protocol: _edit(protocol.parent / "tasks.jsonl", old, new)


PROTOCOL_ERRORS = [
    pytest.param(
        _protocol("within_deadline]", "within_deadline, f1_score]"),
        2,
        ("eval_protocol.yaml: metrics.functions: 'f1_score' cannot map", "port it"),
        id="unknown-metric",
    ),
    pytest.param(
        _protocol("REPLACE_AFTER_HASHING", "a" * 64),
        3,
        ("eval_protocol.yaml: dataset.sha256: digest mismatch", "tasks.jsonl has"),
        id="dataset-digest",
    ),
    pytest.param(
        _protocol("protocol_id:", "protocl_id:"),
        1,
        ("eval_protocol.yaml: protocl_id: not a field", "did you mean 'protocol_id'?"),
        id="misspelt-key",
    ),
    pytest.param(
        _tasks('"expect": {"ok": true, "n": 3}', '"expect": [true, 3]'),
        2,
        ("tasks.jsonl:1: json_schema_ok cannot map", "give the line a 'schema'"),
        id="schema-of-a-list",
    ),
    pytest.param(
        _tasks('"deadline_s": 5}', '"deadline_s": 45}'),
        2,
        ("tasks.jsonl:1: deadline_s 45 is past runtime.timeout_s 30",),
        id="deadline-past-timeout",
    ),
    pytest.param(
        _tasks('"deadline_s": 5}', '"deadline_s": "5s"}'),
        1,
        ("tasks.jsonl:1: deadline_s: must be a number",),
        id="deadline-not-a-number",
    ),
    pytest.param(
        _protocol("kind: scripted", "kind: checkpoint"),
        2,
        ("control.kind 'checkpoint' cannot map by itself", "--arm frozen-stub-v1=DIR"),
        id="control-kind",
    ),
    pytest.param(
        _protocol('python: "3.11"', "python: 3.10"),
        1,
        ("runtime.python: the number 3.1;", 'like "3.11"'),
        id="python-unquoted",
    ),
    pytest.param(
        _protocol("path: tasks.jsonl", "path: missing.jsonl"),
        1,
        ("missing.jsonl: not found",),
        id="missing-dataset",
    ),
    pytest.param(
        _tasks('"id": "t002"', '"id": "t001"'),
        1,
        ("tasks.jsonl:2: id 't001' repeats", "tasks.jsonl:1"),
        id="repeated-id",
    ),
]


@pytest.mark.parametrize(("edit", "code", "needles"), PROTOCOL_ERRORS)
def test_seed000_bad_input_is_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    edit: Callable[[Path], None],
    code: int,
    needles: tuple[str, ...],
) -> None:
    protocol = protocol_copy(tmp_path)
    edit(protocol)
    out = tmp_path / "out"
    found, _, stderr = cli(capsys, "import", "seed000", str(protocol), "--out", str(out))
    one_line(found, stderr, code, *needles)
    assert not out.exists()


def test_seed000_refusals_through_the_installed_command(tmp_path: Path) -> None:
    protocol = protocol_copy(tmp_path)
    _edit(protocol, "within_deadline]", "within_deadline, f1_score]")
    result = run_cli("import", "seed000", str(protocol), "--out", str(tmp_path / "out"))
    one_line(result.returncode, result.stderr, 2, "'f1_score' cannot map")
    result = run_cli("import", "seed000", str(protocol))
    one_line(result.returncode, result.stderr, 2, "Missing option '--out'")


def test_seed000_without_python_pin_or_candidate_imports_without_docker(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    protocol = protocol_copy(tmp_path)
    _edit(protocol, '  python: "3.11"\n', "")
    tasks = tmp_path / "pack.jsonl"
    shutil.copy(protocol.parent / "tasks.jsonl", tasks)
    (protocol.parent / "tasks.jsonl").unlink()  # the TASKS argument stands in for dataset.path
    out = tmp_path / "out"
    code, _, stderr = cli(capsys, "import", "seed000", str(protocol), str(tasks), "--out", str(out))
    assert code == 0, stderr
    assert "runtime.python missing: the image's Python is not checked or pinned" in stderr
    assert "candidate.name agent-under-test: the protocol does not say how it runs" in stderr
    controls = load_controls(out / "controls.yaml").controls
    assert [arm.name for arm in controls.arms] == ["frozen-stub-v1"] and not controls.images
    assert sorted(tasks_of(out)) == ["t001", "t002", "t003"]


@pytest.mark.docker
def test_seed000_protocol_imports_pins_python_and_runs(tmp_path: Path, docker_api: Any) -> None:
    """The seed's protocol and answer tasks: mapped, the image's Python checked against
    runtime.python and the image pinned by ID; then run, the report giving each metric's
    control, candidate, delta and sd as the seed's bench.py prints them."""
    out = tmp_path / "out"
    result = run_cli(
        "import", "seed000", str(SEED000 / "eval_protocol.yaml"), "--out", str(out),
        "--arm", f"agent-under-test={SEED000 / 'candidate'}",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "dataset.sha256 is the placeholder REPLACE_AFTER_HASHING" in result.stderr
    assert "metrics.module metrics.py: not executed" in result.stderr
    assert "control frozen-stub-v1 (kind scripted): a scripted no-op" in result.stderr
    assert f"runtime.python 3.11: image {IMAGE} has Python 3.11." in result.stderr
    assert "candidate.name" not in result.stderr  # given with --arm

    loaded = load_controls(out / "controls.yaml")
    controls = loaded.controls
    assert controls.protocol_id == "agent-bench-2026-09-21"
    assert (controls.runtime.seed, controls.runtime.timeout_s) == (20260921, 30)
    assert controls.images[IMAGE] == docker_api.inspect_image(IMAGE)["Id"]  # type: ignore[attr-defined]
    assert controls.runtime.python == "3.11"  # checked again before every run
    assert controls.control_arm == "frozen-stub-v1"
    first = tasks_of(out)["t001"]
    assert first["metrics"] == ["exact_match", "json_schema_ok", "within_deadline"]
    assert first["schema"] == {"type": "object", "required": ["n", "ok"]}
    assert (first["deadline_s"], first["timeout_s"]) == (5, 30)
    assert yaml.safe_load((out / "controls.yaml").read_text())["suite"]["sha256"]

    run = tmp_path / "run"
    result = run_cli("run", str(out / "controls.yaml"), "--out", str(run), "-j", "6")
    assert result.returncode == 0, result.stderr
    report = json.loads((run / "report.json").read_text())
    rows = {row["metric"]: row for row in report["metric_deltas"]}
    assert rows["exact_match"]["candidate"] == pytest.approx(2 / 3)
    assert rows["json_schema_ok"]["delta"] == 1.0


@pytest.mark.docker
def test_seed000_python_pin_mismatch_is_exit_3(tmp_path: Path, docker_api: Any) -> None:
    protocol = protocol_copy(tmp_path)
    _edit(protocol, 'python: "3.11"', 'python: "3.9"')
    result = run_cli("import", "seed000", str(protocol), "--out", str(tmp_path / "out"))
    line = one_line(result.returncode, result.stderr, 3, "runtime.python pins 3.9", IMAGE)
    assert "has Python 3.11." in line and "--image" in line
    assert not (tmp_path / "out").exists()
