"""The tests' fork server (``tests/cli_forkserver.py``) runs a command as the console script
does: same exit code, stdout and stderr, in the working directory asked for, in a process
of its own, from a server started with the command's environment."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests import cli_forkserver
from tests.helpers import make_suite, repo_task

EXE = Path(__file__).resolve().parents[1] / ".venv" / "bin" / "deltarun"
RUN = Path(__file__).resolve().parent / "fixtures" / "run-quickstart"
ARMS = [{"name": "c", "control": True, "agent": {"type": "scripted", "action": "noop"}}]


def both(tmp_path: Path, *args: str) -> tuple[tuple, tuple]:
    """The same command run by the console script and by a fork server: (code, out, err)."""
    full = {**os.environ, "COLUMNS": "200"}
    plain = subprocess.run(
        [str(EXE), *args], capture_output=True, text=True, cwd=tmp_path, env=full, timeout=120
    )
    server = cli_forkserver.Server(EXE, full)
    try:
        owner, code, out, err = server.run(args, tmp_path, 120)
    finally:
        server.close()
    assert owner.split(":")[0].isdigit() and owner.split(":")[1] != "0"
    return (plain.returncode, plain.stdout, plain.stderr), (code, out, err)


@pytest.mark.parametrize(
    "args",
    [
        ("--version",),
        ("run",),  # usage error: exit 2
        ("report", "no-such-run"),  # user error: exit 1, one line
        ("run", "controls.yaml", "--out", "run"),  # a controls file with an unknown key
        ("schema", "--help"),
    ],
    ids=["version", "usage", "missing-run", "bad-controls", "help"],
)
def test_a_forked_command_answers_as_the_console_script(tmp_path: Path, args: tuple) -> None:
    controls = make_suite(tmp_path, [repo_task("t1")], ARMS)
    controls.write_text(controls.read_text().replace("timeout_s:", "timout_s:"))
    assert controls == tmp_path / "controls.yaml"
    plain, forked = both(tmp_path, *args)
    assert forked == plain
    assert plain[0] != 0 or args in {("--version",), ("schema", "--help")}


def test_each_command_gets_its_own_directory_and_process_and_each_environment_its_server(
    tmp_path: Path,
) -> None:
    first = {**os.environ, "COLUMNS": "200", "FORKSERVER_TEST": str(tmp_path)}  # new here
    server = cli_forkserver.Server(EXE, first)
    try:
        owners, errors = set(), []
        for name in ("one", "two"):
            where = tmp_path / name
            where.mkdir()
            if name == "two":
                (where / "run-here").write_text("")  # a relative path is read from the cwd
            owner, code, _out, err = server.run(("report", "run-here"), where, 60)
            assert code == 1, err
            owners.add(owner)
            errors.append(err)
        assert "not a run directory" in errors[0] and "Not a directory" in errors[1], errors
        assert len(owners) == 2  # two processes
    finally:
        server.close()
    assert server.process.returncode == 0  # ended when its connection closed
    # a server serves the environment it was started with, and only that one; none is
    # started for an environment's first command (a plain subprocess costs as much)
    other = {**first, "COLUMNS": "40"}
    assert cli_forkserver.server_for(EXE, other) is None
    assert cli_forkserver.server_for(EXE, other) is cli_forkserver.server_for(EXE, other)
    assert cli_forkserver.server_for(EXE, first) is None
    assert cli_forkserver.server_for(EXE, first) not in {
        None,
        cli_forkserver.server_for(EXE, other),
    }
    # nor one per test: pytest's own per-test variable travels with each command
    each = [{**first, "PYTEST_CURRENT_TEST": name} for name in ("a (call)", "b (call)")]
    assert cli_forkserver.server_for(EXE, each[0]) is cli_forkserver.server_for(EXE, each[1])
    cli_forkserver.close_all()  # the next test's commands start their own


def test_a_command_that_outlives_its_timeout_is_killed(tmp_path: Path) -> None:
    # `deltarun view` serves until stopped: the server kills it at the timeout and answers.
    server = cli_forkserver.Server(EXE, {**os.environ, "COLUMNS": "200"})
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            server.run(("view", str(RUN), "--port", "0"), tmp_path, 3)
        # and serves the next command
        _owner, code, out, _err = server.run(("--version",), tmp_path, 60)
        assert code == 0 and out.startswith("deltarun ")
    finally:
        server.close()
