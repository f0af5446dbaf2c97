"""Bad input: one line naming the file, the field and the fix; the right exit code; no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
from tests.helpers import ADD_FIXTURE, make_suite, repo_task

ARMS = [{"name": "c", "control": True, "agent": {"type": "scripted", "action": "noop"}}]


def assert_one_line(result: subprocess.CompletedProcess[str], code: int, *needles: str) -> None:
    assert result.returncode == code, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_malformed_task_line(tmp_path: Path) -> None:
    controls = make_suite(tmp_path, [repo_task("t1")], ARMS)
    tasks = tmp_path / "suite" / "tasks.jsonl"
    tasks.write_text(tasks.read_text() + "{oops\n")
    assert_one_line(run_cli("seal", str(controls)), 1, "tasks.jsonl:2", "not valid JSON")


def test_unknown_key_in_controls(tmp_path: Path) -> None:
    controls = make_suite(tmp_path, [repo_task("t1")], ARMS)
    controls.write_text(controls.read_text().replace("timeout_s:", "timout_s:"))
    result = run_cli("run", str(controls), "--out", str(tmp_path / "run"))
    assert_one_line(result, 1, "controls.yaml", "runtime.timout_s", "unknown key")
    assert not (tmp_path / "run").exists()


def test_missing_and_unsafe_archives(tmp_path: Path) -> None:
    controls = make_suite(tmp_path, [repo_task("t1")], ARMS)
    (tmp_path / "suite" / "hidden" / "t1.tar").unlink()
    assert_one_line(
        run_cli("run", str(controls), "--out", str(tmp_path / "r1")),
        1,
        "hidden/t1.tar",
        "not found",
    )
    with tarfile.open(tmp_path / "suite" / "hidden" / "t1.tar", "w") as archive:
        info = tarfile.TarInfo("../../etc/cron.d/evil")
        archive.addfile(info)
    assert_one_line(run_cli("seal", str(controls)), 1, "t1.tar", "escapes the destination")


def test_docker_unreachable(tmp_path: Path) -> None:
    controls = make_suite(tmp_path, [repo_task("t1")], ARMS)
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"}
    exe = Path(__file__).resolve().parents[1] / ".venv" / "bin" / "deltarun"
    result = subprocess.run(
        [str(exe), "run", str(controls), "--out", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert_one_line(result, 1, "Docker engine not reachable")


@pytest.mark.docker
def test_missing_image(tmp_path: Path, docker_api: Any) -> None:
    task = {**repo_task("t1"), "image": "deltarun/no-such-image:1"}
    controls = make_suite(tmp_path, [task], ARMS)
    assert_one_line(
        run_cli("run", str(controls), "--out", str(tmp_path / "run")),
        1,
        "deltarun/no-such-image:1",
        "make images",
    )


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    assert run_cli("run", str(tmp_path / "c.yaml")).returncode == 2
    assert run_cli("schema", "nonsense").returncode == 2


@pytest.mark.docker
def test_a_value_checked_past_the_command_line_is_still_a_usage_error(
    tmp_path: Path, docker_api: Any
) -> None:
    """--network and --baseline-mode are checked once, where every entry point passes
    (suite.build, run.prepare): one line and exit 2 from the command line too (`build`
    asks the engine first)."""
    controls = make_suite(tmp_path, [repo_task("t1")], ARMS)
    network = run_cli("build", str(controls), "--network", "bogus")
    assert_one_line(network, 2, "--network 'bogus'", "default, none")
    mode = run_cli("run", str(controls), "--out", str(tmp_path / "r"), "--baseline-mode", "on")
    assert_one_line(mode, 2, "--baseline-mode 'on'", "skill-on, skill-off or both")
    assert not (tmp_path / "r").exists()


def test_schema_is_json_schema() -> None:
    result = run_cli("schema", "controls")
    assert result.returncode == 0
    schema = json.loads(result.stdout)
    assert "arms" in schema["properties"] and schema["additionalProperties"] is False


@pytest.mark.docker
def test_image_without_harness_tools_is_refused_at_start(tmp_path: Path, docker_api: Any) -> None:
    # The Debian base image has git and timeout but no agent user (uid 1000).
    task = {**repo_task("t1"), "image": "deltarun/base:bookworm"}
    controls = make_suite(tmp_path, [task], ARMS)
    result = run_cli("run", str(controls), "--out", str(tmp_path / "run"))
    assert_one_line(result, 1, "deltarun/base:bookworm", "agent user with uid 1000", "make images")
    assert not (tmp_path / "run").exists()  # nothing written, no trial ran


@pytest.mark.docker
def test_limit_the_engine_rejects_is_refused_at_start(tmp_path: Path, docker_api: Any) -> None:
    controls = make_suite(tmp_path, [repo_task("t1")], ARMS, runtime={"limits": {"memory": "1k"}})
    result = run_cli("run", str(controls), "--out", str(tmp_path / "run"))
    assert_one_line(result, 1, "runtime.limits")
    assert not (tmp_path / "run").exists()


def test_expect_protocol_refuses_edited_controls(tmp_path: Path) -> None:
    """A pre-registered protocol cannot be edited silently: exit 3 before anything runs."""
    from runner.config.loader import load_controls

    controls = make_suite(tmp_path, [repo_task("t1")], ARMS)
    registered = load_controls(controls).protocol_sha256
    controls.write_text(controls.read_text().replace("timeout_s: ", "timeout_s: 1"))
    edited = load_controls(controls).protocol_sha256
    assert edited != registered
    result = run_cli(
        "run", str(controls), "--out", str(tmp_path / "r"), "--expect-protocol", registered
    )
    assert_one_line(result, 3, "controls.yaml", f"hashes to protocol {edited}", registered)
    assert not (tmp_path / "r").exists()
    short = run_cli("run", str(controls), "--out", str(tmp_path / "r"), "--expect-protocol", "abc")
    assert_one_line(short, 1, "--expect-protocol", "at least the first 12")


def _commands() -> list[str]:
    from runner.cli import app

    names = [c.name or (c.callback.__name__ if c.callback else "") for c in app.registered_commands]
    return sorted(n.replace("_", "-") for n in names if n)


@pytest.mark.parametrize("command", _commands())
def test_every_command_refuses_an_unknown_option_in_one_line(
    command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A usage error is one line and exit 2, never a traceback (in process: one per command)."""
    from runner import cli

    monkeypatch.setattr("sys.argv", ["deltarun", command, "--no-such-flag"])
    with pytest.raises(SystemExit) as ended:
        cli.main()
    assert ended.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in lines[0], lines
    assert "--no-such-flag" in lines[0] and f"deltarun {command} --help" in lines[0]


def test_a_missing_argument_and_a_bad_value_are_one_line(tmp_path: Path) -> None:
    assert_one_line(run_cli("report"), 2, "Missing argument", "deltarun report --help")
    controls = make_suite(tmp_path, [repo_task("t1")], ARMS)
    bad = run_cli("run", str(controls), "--out", str(tmp_path / "r"), "-j", "zero")
    assert_one_line(bad, 2, "'-j' / '--parallel'")


def test_schema_alone_lists_the_formats() -> None:
    result = run_cli("schema")
    assert result.returncode == 0, result.stderr
    assert [line.split()[0] for line in result.stdout.splitlines()[:4]] == [
        "controls",
        "task",
        "trial",
        "report",
    ]


def test_sealing_the_suite_alone_says_how_to_pin_it(tmp_path: Path) -> None:
    """Edit tasks.jsonl, seal the suite directory, run: the run stops on the old pin, and
    both the seal and the run say that the controls file is what to seal."""
    controls = make_suite(tmp_path, [repo_task("t1")], ARMS)
    tasks = tmp_path / "suite" / "tasks.jsonl"
    tasks.write_text(tasks.read_text().replace("Fix add().", "Please fix add()."))
    sealed = run_cli("seal", str(tmp_path / "suite"))
    assert sealed.returncode == 0, sealed.stderr
    assert "no controls file was changed" in sealed.stderr
    assert "deltarun seal controls.yaml" in sealed.stderr
    result = run_cli("run", str(controls), "--out", str(tmp_path / "run"))
    assert_one_line(result, 3, "tasks.jsonl: digest mismatch", "deltarun seal controls.yaml")
    assert run_cli("seal", str(controls)).returncode == 0


@pytest.mark.parametrize(
    "change, needles",
    [
        (
            {"kind": "negative"},
            ["tasks.jsonl:1", "'t1'", "negative task", "remove hidden"],
        ),
        (
            {"hidden_tests": ["tests/test_hiden.py::test_add"]},
            ["tasks.jsonl:1", "names tests/test_hiden.py", "neither the hidden archive"],
        ),
        (
            {
                "hidden_tests": None,
                "hidden_test": "PYTHONHASHSEED=0 python3 -m pytest -q tests/nope.py",
            },
            ["tasks.jsonl:1", "names tests/nope.py"],
        ),
        (
            {"hidden_tests": None, "hidden_test": "python3 tests/check.py"},
            ["tasks.jsonl:1", "names tests/check.py"],
        ),
    ],
    ids=["negative-with-hidden", "declared-test-missing", "pytest-path-missing", "python-file"],
)
def test_seal_refuses_a_task_line_with_an_authoring_mistake(
    tmp_path: Path, change: dict[str, Any], needles: list[str]
) -> None:
    task = {**repo_task("t1"), **change}
    task = {k: v for k, v in task.items() if v is not None}
    controls = make_suite(tmp_path, [task], ARMS, seal=False)
    before = (tmp_path / "suite" / "tasks.jsonl").read_bytes()
    assert_one_line(run_cli("seal", str(controls)), 1, *needles)
    assert (tmp_path / "suite" / "tasks.jsonl").read_bytes() == before  # nothing written


def test_seal_accepts_paths_it_cannot_judge_and_files_the_fixture_has(tmp_path: Path) -> None:
    tasks = [
        {**repo_task("a"), "hidden_tests": None, "hidden_test": "cd tests && pytest -q x.py"},
        {**repo_task("b"), "hidden_tests": ["tests/test_visible.py", "tests/test_hidden.py"]},
        {**repo_task("c"), "hidden_tests": None, "hidden_test": "pytest -k test_add.py tests/"},
    ]
    tasks = [{k: v for k, v in t.items() if v is not None} for t in tasks]
    controls = make_suite(tmp_path, tasks, ARMS, seal=False)
    result = run_cli("seal", str(controls))
    assert result.returncode == 0, result.stderr
    assert "warning" not in result.stderr


def test_seal_warns_about_a_fixture_under_one_top_level_folder(tmp_path: Path) -> None:
    nested = {f"repo/{path}": data for path, data in ADD_FIXTURE.items()}
    controls = make_suite(tmp_path, [repo_task("t1")], ARMS, fixtures={"t1": nested}, seal=False)
    result = run_cli("seal", str(controls))
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, result.stderr
    assert "tasks.jsonl:1" in warnings[0] and "sits under 'repo/'" in warnings[0]
    assert "tar -C repo" in warnings[0]


def test_a_command_arm_naming_a_file_its_directory_lacks_stops_the_run(tmp_path: Path) -> None:
    agent = {"type": "command", "dir": "agents/a", "argv": ["sh", "/opt/agent/rnu.sh"]}
    (tmp_path / "agents" / "a").mkdir(parents=True)
    (tmp_path / "agents" / "a" / "run.sh").write_text("true\n")
    controls = make_suite(tmp_path, [repo_task("t1")], [*ARMS, {"name": "cmd", "agent": agent}])
    result = run_cli("run", str(controls), "--out", str(tmp_path / "run"))
    assert_one_line(result, 1, "arms[1] (cmd)", "agent.argv[1] /opt/agent/rnu.sh", "agents/a")
    assert not (tmp_path / "run").exists()


@pytest.mark.docker
def test_a_command_arm_naming_a_program_the_image_lacks_stops_the_run(
    tmp_path: Path, docker_api: Any
) -> None:
    agent = {"type": "command", "dir": "agents/a", "argv": ["no-such-agent-cli", "--go"]}
    (tmp_path / "agents" / "a").mkdir(parents=True)
    (tmp_path / "agents" / "a" / "run.sh").write_text("true\n")
    controls = make_suite(tmp_path, [repo_task("t1")], [*ARMS, {"name": "cmd", "agent": agent}])
    result = run_cli("run", str(controls), "--out", str(tmp_path / "run"))
    assert_one_line(result, 1, "arms[1] (cmd)", "'no-such-agent-cli' is not a command in image")
    assert not (tmp_path / "run" / "trials.jsonl").exists()


def test_a_patch_arm_without_an_output_for_a_task_stops_the_run(tmp_path: Path) -> None:
    (tmp_path / "gold").mkdir()
    (tmp_path / "gold" / "t1.diff").write_text("")
    arms = [*ARMS, {"name": "gold", "agent": {"type": "patch", "dir": "gold"}}]
    controls = make_suite(tmp_path, [repo_task("t1"), repo_task("t2")], arms)
    result = run_cli("run", str(controls), "--out", str(tmp_path / "run"))
    assert_one_line(result, 1, "arms[1] (gold)", "1 task(s): t2", "--allow-missing")
    assert not (tmp_path / "run").exists()


def test_an_unknown_key_suggests_the_closest_one_and_the_schema(tmp_path: Path) -> None:
    controls = make_suite(tmp_path, [repo_task("t1")], ARMS)
    controls.write_text(controls.read_text().replace("verify_timeout_s:", "verify_timout_s:"))
    result = run_cli("run", str(controls), "--out", str(tmp_path / "run"))
    assert_one_line(
        result, 1, "runtime.verify_timout_s", "did you mean 'verify_timeout_s'?", "schema controls"
    )
    controls = make_suite(tmp_path / "b", [{**repo_task("t1"), "hiden": "x.tar"}], ARMS, seal=False)
    result = run_cli("seal", str(controls))
    assert_one_line(result, 1, "tasks.jsonl:1", "hiden", "did you mean 'hidden'?", "schema task")


def test_a_patch_arm_with_a_broken_answer_file_stops_the_run(tmp_path: Path) -> None:
    (tmp_path / "gold").mkdir()
    (tmp_path / "gold" / "t1.answer.json").write_text('{"total": 4')
    arms = [*ARMS, {"name": "gold", "agent": {"type": "patch", "dir": "gold"}}]
    controls = make_suite(tmp_path, [repo_task("t1")], arms)
    result = run_cli("run", str(controls), "--out", str(tmp_path / "run"), "--allow-missing")
    assert_one_line(result, 1, "arms[1] (gold)", "gold/t1.answer.json is not JSON")


def test_seal_strips_a_top_level_folder_when_asked(tmp_path: Path) -> None:
    nested = {f"repo/{path}": data for path, data in ADD_FIXTURE.items()}
    controls = make_suite(tmp_path, [repo_task("t1")], ARMS, fixtures={"t1": nested}, seal=False)
    result = run_cli("seal", str(controls), "--strip-top-folder")
    assert result.returncode == 0, result.stderr
    assert "stripped 'repo/' from fixtures/t1.tar" in result.stderr
    with tarfile.open(tmp_path / "suite" / "fixtures" / "t1.tar") as archive:
        names = set(archive.getnames())
    assert "calc/__init__.py" in names and not any(n.startswith("repo") for n in names)
    again = run_cli("seal", str(controls))
    assert again.returncode == 0 and "warning" not in again.stderr, again.stderr


@pytest.mark.parametrize(
    ("raised", "needle"),
    [
        (RecursionError("maximum recursion depth exceeded"), "nested too deeply"),
        (MemoryError(), "too large to process (MemoryError)"),
        (ValueError("Exceeds the limit (4300 digits)"), "cannot process the input (ValueError"),
        (UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates"), "UnicodeEncodeError"),
    ],
)
def test_the_catch_point_turns_a_parse_the_code_missed_into_one_line(
    raised: BaseException,
    needle: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The last resort: never a traceback, never an error of the error handler itself
    (typer's vendored click has no ``Exit``: looking it up used to raise AttributeError)."""
    from runner import cli

    def app(**_kwargs: object) -> None:
        raise raised

    monkeypatch.setattr(cli, "app", app)
    with pytest.raises(SystemExit) as ended:
        cli.main()
    assert ended.value.code == 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and needle in lines[0], lines


def test_a_bug_still_shows_its_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    from runner import cli

    def app(**_kwargs: object) -> None:
        raise KeyError("a bug")

    monkeypatch.setattr(cli, "app", app)
    with pytest.raises(KeyError):
        cli.main()


def test_every_message_is_one_short_printable_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from runner import cli
    from runner.bounded_input import MAX_MESSAGE
    from runner.errors import UserError

    def app(**_kwargs: object) -> None:
        raise UserError("tasks.jsonl:1: " + "line\n\x1b[31m" * 100_000 + "; the fix")

    monkeypatch.setattr(cli, "app", app)
    with pytest.raises(SystemExit) as ended:
        cli.main()
    assert ended.value.code == 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and len(lines[0]) <= MAX_MESSAGE and "\x1b" not in lines[0]
    assert lines[0].startswith("deltarun: error: tasks.jsonl:1: line\\nline\\n")  # escapes dropped
    assert lines[0].endswith("; the fix")
