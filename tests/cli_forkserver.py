"""A fork server for the tests' `deltarun` commands: each command in a process of its own,
without paying for the interpreter's start and the imports every time.

Starting `deltarun` costs about half a second of CPU before a command does anything,
nearly all of it imports (pydantic models, docker, rich, typer), and the suite runs
several hundred commands. ``run_cli`` (``tests/conftest.py``) sends each one here: a
server process that imported the command line's modules once forks a fresh child per
command, and the child runs the same ``runner.cli.main`` the console script calls.

What stays as it was with ``subprocess.Popen`` of the console script:

- the command runs in a process of its own (its own pid, labels and leak checks by that
  pid, exit code, signals, atexit handlers and threads ended as at interpreter exit), in
  the working directory and with the environment asked for, stdin ``/dev/null``;
- the child is forked from a server that has run no command: nothing a command caches
  or changes reaches the next one;
- a server serves one environment, exactly (it was started with it): a module that reads
  the environment when it is imported read the one the command gets. A command asked
  with another environment gets a server of its own.

What differs: the console script's few lines around ``main`` are not run (tests that
start the real executable cover them: ``tests/distributed_support.py``,
``tests/test_orphans.py``, ``tests/test_security.py``, ...). ``DELTARUN_TEST_FORKSERVER=0``
turns the server off (every command a plain subprocess).

The server's side is this file run as a script; the tests' side is ``server_for`` and
``Server.run``.
"""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

# What the server imports before its first fork: the command line (its command modules
# with it) and the modules its commands import when they run.
PRELOAD = (
    "runner.cli",
    "runner.run.service",
    "runner.run.validate",
    "runner.run.report_files",
    "runner.run.status_sources",
    "runner.run.replay_steps",
    "runner.run.image_pins",
    "runner.run.agent_build",
    "runner.run.retry",
    "runner.view.static_site",
    "runner.report.assemble",
    "runner.export.kit_steps",
    "runner.suite.workflows",
    "runner.swebench.workflow",
    "runner.seedkits.seed_import",
    "runner.cli.schemas",
)

MAX_SERVERS = 3  # per test process, one per environment: the least recently used closed first
# Set by pytest for each test phase, read by nothing deltarun imports: it travels with each
# request rather than starting a server per test.
PER_COMMAND = ("PYTEST_CURRENT_TEST",)
MESSAGE = 1 << 16
Key = tuple[tuple[str, str], ...]


def _split(env: dict[str, str]) -> tuple[Key, dict[str, str]]:
    """An environment as what its server is started with (as a key) and what travels with
    each of its commands (``PER_COMMAND``)."""
    shared = tuple(sorted((k, v) for k, v in env.items() if k not in PER_COMMAND))
    return shared, {k: v for k, v in env.items() if k in PER_COMMAND}


# -- the server (this file run as a script) -----------------------------------------------


def serve(connection: socket.socket, executable: str) -> None:
    """Answer requests until the tests' side closes the connection: fork, report the
    child's identity, then its exit code."""
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    from runner.sandbox.labels import process_identity

    if threading.active_count() != 1:  # a fork copies one thread: nothing may run in others
        raise SystemExit(f"cli_forkserver: the imports started threads: {threading.enumerate()}")
    connection.send(b'{"ready": true}')
    while True:
        message, fds, _flags, _address = socket.recv_fds(connection, MESSAGE, 3)
        if not message:
            return
        request = json.loads(message)
        pid = os.fork()
        if pid == 0:
            _child(connection, executable, request, fds)
        for fd in fds:
            os.close(fd)
        connection.send(json.dumps({"owner": process_identity(pid)}).encode())
        _, status = os.waitpid(pid, 0)
        connection.send(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}).encode())


def _child(connection: socket.socket, executable: str, request: dict, fds: list[int]) -> None:
    """The command, as the console script would run it; never returns."""
    code: object = 1
    try:
        connection.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        for name in PER_COMMAND:
            os.environ.pop(name, None)
        os.environ.update(request["env"])
        sys.argv = [executable, *request["args"]]
        sys.path[0] = str(Path(executable).parent)  # as the console script's own directory
        import runner.cli

        try:
            runner.cli.main()
            code = 0
        except SystemExit as exc:  # what the interpreter does with it at exit
            code = exc.code
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 1
        code = _interpreter_exit(code)
    finally:
        os._exit(code if isinstance(code, int) else 1)


def _interpreter_exit(code: object) -> int:
    """What a normal exit does after ``main``: a non-int code printed, non-daemon threads
    joined, atexit handlers run, streams flushed."""
    import atexit

    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    return code


# -- the tests' side ---------------------------------------------------------------------


class Server:
    """One server process and its connection, for one environment."""

    def __init__(self, executable: Path, env: dict[str, str]) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.connection = ours
        self.process = subprocess.Popen(
            [sys.executable, __file__, str(theirs.fileno()), str(executable)],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            cwd=Path(__file__).resolve().parents[1],
            env=dict(_split(env)[0]),
        )
        theirs.close()
        ours.settimeout(120)
        if json.loads(ours.recv(MESSAGE) or b"{}").get("ready") is not True:
            raise RuntimeError("cli_forkserver: the server did not start (see stderr above)")

    def run(
        self,
        args: tuple[str, ...],
        cwd: Path | None,
        timeout: float,
        env: dict[str, str] | None = None,
    ) -> tuple[str, int, str, str]:
        """Owner identity, exit code, stdout and stderr of one command (``env``: the
        command's whole environment, whose ``PER_COMMAND`` variables it gets)."""
        request = {"args": list(args), "cwd": str(cwd or Path.cwd()), "env": _split(env or {})[1]}
        with (
            open(os.devnull, "rb") as stdin,
            tempfile.TemporaryFile() as stdout,
            tempfile.TemporaryFile() as stderr,
        ):
            fds = [stdin.fileno(), stdout.fileno(), stderr.fileno()]
            self.connection.settimeout(30)
            socket.send_fds(self.connection, [json.dumps(request).encode()], fds)
            owner = json.loads(self.connection.recv(MESSAGE))["owner"]
            self.connection.settimeout(timeout)
            try:
                answer = self.connection.recv(MESSAGE)
            except TimeoutError:
                os.kill(int(owner.split(":")[0]), signal.SIGKILL)
                self.connection.settimeout(30)
                self.connection.recv(MESSAGE)
                raise subprocess.TimeoutExpired(["deltarun", *args], timeout) from None
            returncode = json.loads(answer)["returncode"]
            return owner, returncode, _text(stdout), _text(stderr)

    def close(self) -> None:
        self.connection.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _text(stream: io.BufferedRandom | tempfile._TemporaryFileWrapper[bytes]) -> str:
    """What ``Popen(text=True).communicate()`` gives for those bytes: decoded with the
    locale's encoding, newlines universal."""
    stream.seek(0)
    return io.TextIOWrapper(io.BytesIO(stream.read())).read()


_SERVERS: dict[Key, Server] = {}  # least recently used first
_SEEN: set[Key] = set()


def enabled() -> bool:
    return os.environ.get("DELTARUN_TEST_FORKSERVER", "1") != "0"


def server_for(executable: Path, env: dict[str, str]) -> Server | None:
    """This test process's server for ``env``, or None the first time ``env`` is asked for:
    a server costs what one plain subprocess costs, so an environment only one command
    uses (a test's own ``DOCKER_HOST``) gets none and closes no server others use."""
    key = _split(env)[0]
    if key in _SERVERS:
        _SERVERS[key] = _SERVERS.pop(key)  # now the most recently used
        return _SERVERS[key]
    if key not in _SEEN:
        _SEEN.add(key)
        return None
    if len(_SERVERS) >= MAX_SERVERS:
        _SERVERS.pop(next(iter(_SERVERS))).close()
    _SERVERS[key] = Server(executable, env)
    return _SERVERS[key]


def close_all() -> None:
    while _SERVERS:
        _SERVERS.popitem()[1].close()


if __name__ == "__main__":
    serve(socket.socket(fileno=int(sys.argv[1])), sys.argv[2])
