"""runner/sandbox_scripts/guard.py in a real hardened sandbox (no mocks).

The guard runs as the agent's uid (1000) inside coreutils ``timeout``, the way the
harness will run it. The attacks are detached watchers that wait for the agent's
main process to exit and then edit /workspace; each is first shown to work
without the guard, so a guard that did nothing would fail these tests.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.sandbox.base import ROOT_USER, ExecRequest, ExecResult, Limits, SandboxSpec
from runner.sandbox.docker import DockerSandbox, DockerSandboxFactory
from runner.trees.archives import single_file_tar
from tests.helpers import PY_IMAGE, tar_bytes

pytestmark = pytest.mark.docker

GUARD_SOURCE = Path(__file__).resolve().parents[1] / "runner" / "sandbox_scripts" / "guard.py"
GUARD = "/io/guard.py"
RUN = ["python3", "-I", "-S", GUARD, "run"]
MODES = {"ptrace": [], "wait": ["--no-ptrace"]}
REPEATS = 5

# Run as root: the file's content and every live process of uid 1000 (none may be left).
CHECK = r"""
import json, os
try:
    data = open('/workspace/f').read()
except OSError:
    data = None
procs = []
for name in os.listdir('/proc'):
    if not name.isdigit():
        continue
    try:
        lines = open('/proc/%s/status' % name).read().splitlines()
    except OSError:
        continue
    fields = dict(line.split(':', 1) for line in lines if ':' in line)
    if fields['Uid'].split()[0] == '1000' and fields['State'].split()[0] not in ('Z', 'X'):
        procs.append(name + ' ' + fields['Name'].strip())
print(json.dumps({'f': data, 'procs': procs}))
"""


def parse_report(output: bytes) -> dict[str, str] | None:
    """The fields of the guard's report line (the last ``deltarun-guard: k=v ...`` line)."""
    prefix = "deltarun-guard: "
    for line in reversed(output.decode("utf-8", "replace").splitlines()):
        if not line.startswith(prefix):
            continue
        tokens = line[len(prefix) :].split()
        if tokens and all("=" in token for token in tokens):
            return dict(token.split("=", 1) for token in tokens)
    return None


@pytest.fixture(scope="module")
def sandbox(docker_api: Any) -> Iterator[DockerSandbox]:
    """One hardened sandbox (the production adapter) with the guard in /io, root-owned 0444."""
    spec = SandboxSpec(
        image=PY_IMAGE,
        limits=Limits(memory_bytes=512 << 20, nano_cpus=10**9, pids=256, workspace_bytes=64 << 20),
        lifetime_s=600,
        labels={"run": "guard-test", "job": "x"},
    )
    with DockerSandboxFactory(docker_api).open(spec) as opened:
        tar = single_file_tar("guard.py", GUARD_SOURCE.read_bytes(), uid=0, gid=0, mode=0o444)
        opened.put_archive("/io", tar)
        yield opened


def run(sandbox: DockerSandbox, argv: list[str], timeout_s: float = 20, **kw: Any) -> ExecResult:
    return sandbox.run(ExecRequest(argv=argv, timeout_s=timeout_s, **kw))


def check(sandbox: DockerSandbox) -> dict[str, Any]:
    result = run(sandbox, ["python3", "-I", "-c", CHECK], user=ROOT_USER)
    assert result.exit_code == 0, result.output
    state: dict[str, Any] = json.loads(result.output.decode().strip().splitlines()[-1])
    return state


# --- exit status and the report ------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("command", "code", "field"),
    [
        (["sh", "-c", "echo out; exit 3"], 3, ("exit", "3")),
        (["sh", "-c", "kill -9 $$"], 137, ("signal", "9")),
        (["no-such-program-here"], 127, ("exit", "127")),
        (["true"], 0, ("exit", "0")),
    ],
    ids=["exit3", "sigkill", "not-found", "true"],
)
def test_exit_status_and_report(
    sandbox: DockerSandbox, mode: str, command: list[str], code: int, field: tuple[str, str]
) -> None:
    result = run(sandbox, [*RUN, *MODES[mode], "--", *command])
    report = parse_report(result.output)
    assert result.exit_code == code, result.output
    assert report is not None, result.output
    assert report["mode"] == mode
    assert report[field[0]] == field[1]
    assert "stragglers" not in report
    if command[0] == "no-such-program-here":
        assert b"deltarun-guard: cannot run no-such-program-here: No such file" in result.output


def test_program_stderr_joins_stdout_and_guard_stderr_has_the_report_only(
    sandbox: DockerSandbox, docker_api: Any
) -> None:
    argv = [*RUN, "--", "sh", "-c", "echo to-out; echo to-err >&2; exit 5"]
    exec_id = docker_api.exec_create(sandbox.container, ["timeout", "20", *argv], user="1000:1000")
    out, err = docker_api.exec_start(exec_id["Id"], demux=True)
    assert docker_api.exec_inspect(exec_id["Id"])["ExitCode"] == 5
    assert out == b"to-out\nto-err\n"
    assert err == b"deltarun-guard: mode=ptrace exit=5\n"


@pytest.mark.parametrize("mode", MODES)
def test_the_report_is_copied_to_the_path_on_stdin_and_the_program_reads_nothing(
    sandbox: DockerSandbox, mode: str
) -> None:
    """The copy (``runner.sandbox.guard_run``): the same line, at the path the harness gave
    on standard input; the program's own input is /dev/null, as without a copy."""
    copy = f"/io/.deltarun-guard-report-{mode}-0123456789abcdef"
    program = ["sh", "-c", "readlink /proc/self/fd/0; cat; exit 4"]
    result = run(
        sandbox,
        [*RUN, *MODES[mode], "--", *program],
        separate_stderr=True,
        stdin=f"{copy}\n".encode(),
    )
    assert (result.exit_code, result.output) == (4, b"/dev/null\n")
    assert result.stderr == f"deltarun-guard: mode={mode} exit=4\n".encode()
    assert sandbox.read_file(copy, 4096) == (result.stderr, False)


def test_without_a_path_on_stdin_there_is_no_copy_and_a_file_there_is_never_replaced(
    sandbox: DockerSandbox,
) -> None:
    planted = "/io/.deltarun-guard-report-planted"
    assert run(sandbox, ["sh", "-c", f"echo forged > {planted}"]).exit_code == 0
    before = run(sandbox, ["ls", "-a", "/io"]).output
    assert run(sandbox, [*RUN, "--", "true"]).exit_code == 0  # no input: no copy
    assert run(sandbox, ["ls", "-a", "/io"]).output == before
    again = run(sandbox, [*RUN, "--", "true"], stdin=f"{planted}\n".encode())
    assert again.exit_code == 0 and b"exit=0" in again.output
    assert sandbox.read_file(planted, 4096) == (b"forged\n", False)


# --- the attack: edits after the main process exited ----------------------------------

_DETACH = "</dev/null >/dev/null 2>&1"
_PRELUDE = "MAIN=$$; rm -f /workspace/f /tmp/ready.* /tmp/fifo\n"
_EXIT = "echo before > /workspace/f\nexit 0\n"


def _wait_ready(*names: str) -> str:
    missing = " || ".join(f"[ ! -e /tmp/ready.{name} ]" for name in names)
    return f"while {missing}; do sleep 0.005; done\n"


ATTACKS = {
    # `kill -0 $MAIN` polling, from a setsid'd watcher and from a double-forked one.
    "kill0": _PRELUDE
    + "W='touch /tmp/ready.$1; while kill -0 '$MAIN' 2>/dev/null; do :; done; "
    + "echo EDIT >> /workspace/f'\n"
    + f'setsid sh -c "$W" sh a {_DETACH} &\n'
    + f'( ( sh -c "$W" sh b {_DETACH} & ) & )\n'
    + _wait_ready("a", "b")
    + _EXIT,
    # The main process seen as a zombie (or gone) in /proc/$MAIN/stat.
    "zombie": _PRELUDE
    + "W='touch /tmp/ready.a; while :; do { read -r _ _ s _ < /proc/'$MAIN'/stat; } "
    + '2>/dev/null || break; [ "$s" = Z ] && break; done; echo EDIT >> /workspace/f\'\n'
    + f'setsid sh -c "$W" {_DETACH} &\n'
    + _wait_ready("a")
    + _EXIT,
    # End of file on a pipe whose only writer is the main process.
    "pipe-eof": _PRELUDE
    + "mkfifo /tmp/fifo\n"
    + "setsid sh -c 'exec 3</tmp/fifo; touch /tmp/ready.a; cat <&3 >/dev/null; "
    + f"echo EDIT >> /workspace/f' {_DETACH} &\n"
    + "exec 4>/tmp/fifo\n"
    + _wait_ready("a")
    + _EXIT,
    # coreutils `tail --pid`.
    "tail-pid": _PRELUDE
    + "setsid sh -c 'touch /tmp/ready.a; tail -s 0.01 --pid='$MAIN' -f /dev/null; "
    + f"echo EDIT >> /workspace/f' {_DETACH} &\n"
    + _wait_ready("a")
    + "sleep 0.05\n"
    + _EXIT,
    # A child told by the kernel that its parent (the main process, python here) died.
    "pdeathsig": _PRELUDE
    + "exec python3 -c "
    + shlex.quote(
        "import ctypes, os, signal, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    def edit(*_):\n"
        "        open('/workspace/f', 'a').write('EDIT\\n')\n"
        "        os._exit(0)\n"
        "    signal.signal(signal.SIGTERM, edit)\n"
        "    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG\n"
        "    open('/tmp/ready.a', 'w').close()\n"
        "    while True:\n"
        "        time.sleep(1)\n"
        "while not os.path.exists('/tmp/ready.a'):\n"
        "    time.sleep(0.005)\n"
        "open('/workspace/f', 'w').write('before\\n')\n"
    ),
    # A child polling getppid() for its reparenting when the main process dies.
    "reparent": _PRELUDE
    + "exec python3 -c "
    + shlex.quote(
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    parent = os.getppid()\n"
        "    open('/tmp/ready.a', 'w').close()\n"
        "    while os.getppid() == parent:\n"
        "        pass\n"
        "    open('/workspace/f', 'a').write('EDIT\\n')\n"
        "    os._exit(0)\n"
        "while not os.path.exists('/tmp/ready.a'):\n"
        "    time.sleep(0.005)\n"
        "open('/workspace/f', 'w').write('before\\n')\n"
    ),
}
EDITS = {"kill0": 2}  # two watchers; the others have one

# The fallback (no ptrace) sees the exit only once the main process is a zombie: its
# fds are closed, /proc shows state Z, its children got their parent-death signal and
# were reparented, so these watchers can act before the guard does.
WAIT_MODE_LOSES = {"zombie", "pipe-eof", "pdeathsig", "reparent"}


@pytest.mark.parametrize("attack", ATTACKS)
def test_attack_works_without_the_guard(sandbox: DockerSandbox, attack: str) -> None:
    result = run(sandbox, ["sh", "-c", ATTACKS[attack]])
    assert result.exit_code == 0, result.output
    edited = "before\n" + "EDIT\n" * EDITS.get(attack, 1)
    for _ in range(100):
        state = check(sandbox)
        if state["f"] == edited and not state["procs"]:
            break
    assert state["f"] == edited, state
    assert not state["procs"], state


def _attack_params() -> list[Any]:
    params = []
    for attack in ATTACKS:
        for mode in MODES:
            marks = []
            if mode == "wait" and attack in WAIT_MODE_LOSES:
                reason = (
                    "without ptrace the guard sees the exit only after the kernel made it visible"
                )
                marks.append(pytest.mark.xfail(strict=False, reason=reason))
            params.append(pytest.param(attack, mode, marks=marks, id=f"{attack}-{mode}"))
    return params


@pytest.mark.parametrize(("attack", "mode"), _attack_params())
def test_no_edit_after_the_main_process_exited(
    sandbox: DockerSandbox, attack: str, mode: str
) -> None:
    for attempt in range(REPEATS):
        result = run(sandbox, [*RUN, *MODES[mode], "--", "sh", "-c", ATTACKS[attack]])
        assert result.exit_code == 0, (attempt, result.output)
        report = parse_report(result.output)
        assert report == {"mode": mode, "exit": "0"}, (attempt, result.output)
        state = check(sandbox)
        assert state == {"f": "before\n", "procs": []}, (attempt, state)


# --- the deadline and the sweep --------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_deadline_kills_everything(sandbox: DockerSandbox, mode: str) -> None:
    program = ["sh", "-c", "setsid sleep 100 & sleep 100"]
    argv = ["timeout", "-k", "1", "2", *RUN, *MODES[mode], "--", *program]
    result = run(sandbox, argv, timeout_s=20)
    assert result.exit_code == 124, result.output
    assert parse_report(result.output) == {"mode": mode, "terminated": "15"}
    assert check(sandbox)["procs"] == []


def test_sweep_kills_what_a_previous_exec_left(sandbox: DockerSandbox) -> None:
    left = f"setsid sleep 100 {_DETACH} & ( ( sleep 100 {_DETACH} & ) & )"
    assert run(sandbox, ["sh", "-c", left]).exit_code == 0
    assert len(check(sandbox)["procs"]) == 2
    result = run(sandbox, ["python3", "-I", "-S", GUARD, "sweep"])
    assert result.exit_code == 0, result.output
    assert result.output == b"deltarun-guard: swept=2\n"
    assert check(sandbox)["procs"] == []
    again = run(sandbox, ["python3", "-I", "-S", GUARD, "sweep"])
    assert again.output == b"deltarun-guard: swept=0\n"


# --- modules ---------------------------------------------------------------------------


def test_modules_lists_the_installation_not_the_workspace(sandbox: DockerSandbox) -> None:
    files: dict[str, str | bytes] = {"evilmod.py": "", "calc/__init__.py": "", "evilpkg/x.py": ""}
    sandbox.put_archive("/workspace", tar_bytes(files))
    check_import = ["python3", "-c", "import evilmod, calc"]
    assert run(sandbox, check_import, workdir="/workspace").exit_code == 0  # importable from cwd
    script = (GUARD_SOURCE.parent / "image_modules.py").read_bytes()
    sandbox.put_archive("/io", single_file_tar("image_modules.py", script, uid=0, gid=0))
    result = run(sandbox, ["python3", "-I", "/io/image_modules.py"], workdir="/workspace")
    assert result.exit_code == 0, result.output
    answer = json.loads(result.output)
    names = answer["modules"]
    assert names == sorted(set(names))
    assert answer["pytest_plugins"] == []  # Debian's pytest has no plugins installed
    for name in ("json", "os", "sys", "_json", "pytest", "_pytest", "pluggy", "sitecustomize"):
        assert name in names, name
    for name in ("calc", "evilmod", "evilpkg", "guard", "__pycache__"):
        assert name not in names, name
    assert all(name.isidentifier() for name in names)
