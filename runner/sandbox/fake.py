"""A scripted, in-memory ``Sandbox`` for unit tests of orchestration logic. Not a machine.

DESIGN allows a fake sandbox in one place only: unit tests of the harness's own
orchestration (``execute_trial``'s phases, the model tool loop, the stop rules),
where a container adds seconds and nothing under test. Hardening, adversarial
and end-to-end tests keep the real engine (``runner.sandbox.docker``).

What it does: every call is recorded (``requests``, ``archives``); each tar
given to ``put_archive`` is unpacked into an in-memory tree (``files``,
``dirs``) that ``read_file`` reads; ``run`` first asks the test's ``script``,
and when that returns None, answers from the table below, a model of the
harness's protocol with a sandbox (not a shell). A command the table does not
name exits 0 with no output. While ``cut_outputs`` lasts, a command with ``end_mark``
(``run`` or ``start``) comes back ``cut_short`` with its output lost, as the engine
can cut one (``runner.sandbox.end_mark``).

================================  ====================================================
command (as the harness sends it) answer
================================  ====================================================
``tar -x ... -C DEST`` (stdin)     the tar on stdin unpacked at DEST, as ``put_archive``
baseline (``sh -c '... init'``)   exit 0, like any unnamed command
``guard.py run -- ARGV``          exit 0, the guard's report ``deltarun-guard:
                                  mode=ptrace exit=0`` on stderr (with
                                  ``separate_stderr``, else in ``output``), and
                                  its copy at the path on stdin
``guard.py sweep``                exit 0, ``deltarun-guard: swept=0``
``guard.py census UID``           exit 0, ``deltarun-guard: live=0``
``image_modules.py``              exit 0, ``factory.modules``, no pytest plugins
``git ... diff --cached ...``     exit 0, ``sandbox.patch`` on stdout (``take_patch``)
``git ... apply ...`` + ``stat``   exit 0, an empty workspace's ``stat -f`` on stdout
``stat -f ...``                    the same
``collector.py`` (``start``)       ``finish`` gives what ``run_pytest.py`` sent: the
                                  channel's records on stdout, the collector's
                                  account on stderr
``run_pytest.py`` (verify)        per ``factory.verdict``: ``pass``/``fail`` send the
                                  records of a session (every declared test and
                                  canary reported as an honest pytest would, a
                                  must-fail canary failing: the canaries are the
                                  harness's functions found in the files it put
                                  here, ``_canaries``), exit 1; ``crash``
                                  sends ``start`` only, exit 1; ``timeout``
                                  returns ``timed_out``
``$DELTARUN_HIDDEN_TEST``         exit 0 for ``pass``, 1 for ``fail``/``crash``,
                                  ``timed_out`` for ``timeout``
================================  ====================================================

Not modelled: the kernel (processes, users, permissions, symlinks, ``realpath``),
what commands do to files, resource limits, the network, and time: a timeout is
an ``ExecResult`` a script returns, it never makes anyone wait. A test that
needs any of these uses the real engine.
"""

from __future__ import annotations

import ast
import io
import json
import posixpath
import tarfile
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Literal

from runner.errors import SandboxError
from runner.pyparse import LOCK
from runner.sandbox.applied import applied_of_spec
from runner.sandbox.base import (
    ExecRequest,
    ExecResult,
    ModelCall,
    Sandbox,
    SandboxFactory,
    SandboxSpec,
)

Verdict = Literal["pass", "fail", "crash", "timeout"]
Script = Callable[[ExecRequest, "FakeSandbox"], ExecResult | None]
DEFAULT_MODULES = ("json", "os", "pytest", "_pytest", "pluggy", "sitecustomize")
GUARD_REPORT = b"deltarun-guard: mode=ptrace exit=0\n"


def exec_result(
    exit_code: int | None = 0,
    output: bytes = b"",
    *,
    stderr: bytes = b"",
    timed_out: bool = False,
    truncated: bool = False,
    oom_killed: bool = False,
) -> ExecResult:
    """An ``ExecResult`` in one line, for scripts: ``exec_result(1, stderr=b"fatal")``."""
    return ExecResult(exit_code, output, truncated, timed_out, oom_killed, stderr)


class FakeSandbox:
    """One in-memory sandbox: records every call, answers ``run`` by script or table."""

    def __init__(self, factory: FakeSandboxFactory, spec: SandboxSpec) -> None:
        self.factory = factory
        self.spec = spec
        self.requests: list[ExecRequest] = []
        self.archives: list[tuple[str, bytes]] = []
        self.files: dict[str, bytes] = {}
        self.dirs: set[str] = set()
        self.links: dict[str, str] = {}  # symbolic links: path -> target
        self.patch = b""  # what ``git diff`` "writes" when the harness takes the patch
        # How many commands with ``end_mark`` the "engine" cuts short (``engine_cut``).
        self.cut_outputs = 0
        self.channel = b""  # what the verify phase's pytest sent its collector
        self.closed = False
        # Like the real one: a model endpoint only for a spec with ``model_access``.
        gateway = spec.model_access is not None
        self.model_base_url: str | None = factory.model_base_url if gateway else None
        self.gateway_calls: list[ModelCall] = list(factory.gateway_calls) if gateway else []

    @property
    def image_digest(self) -> str:
        """The factory's ``image_digest``."""
        return self.factory.image_digest

    @property
    def prefilled(self) -> frozenset[str]:
        return frozenset()  # the scripted sandbox always takes the copy path

    @property
    def applied(self) -> Mapping[str, object]:
        """What an engine that applies every flag of the spec reports."""
        return applied_of_spec(self.spec)

    def model_calls(self) -> list[ModelCall]:
        """``gateway_calls``, as a gateway's log would give them."""
        return list(self.gateway_calls)

    def put_archive(self, dest: str, tar: bytes | Path) -> None:
        """Record the tar and unpack its files and directories into ``files`` and ``dirs``."""
        self._check_open()
        self._unpack(dest, tar.read_bytes() if isinstance(tar, Path) else tar)

    def _unpack(self, dest: str, tar_bytes: bytes) -> None:
        self.archives.append((dest, tar_bytes))
        with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as archive:
            for member in archive.getmembers():
                path = posixpath.normpath(posixpath.join(dest, member.name))
                handle = archive.extractfile(member) if member.isfile() else None
                if handle is not None:
                    self.files[path] = handle.read()
                elif member.issym():
                    self.links[path] = member.linkname
                else:
                    self.dirs.add(path)
                parent = posixpath.dirname(path)
                while parent not in self.dirs and parent != "/":
                    self.dirs.add(parent)
                    parent = posixpath.dirname(parent)

    def read_file(self, path: str, cap: int) -> tuple[bytes | None, bool]:
        """A file of ``files`` (None when absent), at most ``cap`` bytes, and a truncated flag."""
        self._check_open()
        data = self.files.get(posixpath.normpath(path))
        if data is None:
            return None, False
        return data[:cap], len(data) > cap

    def run(self, request: ExecRequest) -> ExecResult:
        """Record the request; the script's answer, else the table's (module docstring)."""
        self._check_open()
        self.requests.append(request)
        if self.factory.script is not None:
            scripted = self.factory.script(request, self)
            if scripted is not None:
                return scripted
        return self.engine_cut(request, self._harness(request))

    def engine_cut(self, request: ExecRequest, result: ExecResult) -> ExecResult:
        """``result``, or while ``cut_outputs`` lasts, the same end with its output lost
        before the end mark, as the engine can (``runner.sandbox.end_mark``)."""
        if not request.end_mark or result.timed_out or self.cut_outputs <= 0:
            return result
        self.cut_outputs -= 1
        return replace(result, output=b"", output_truncated=False, stderr=b"", cut_short=True)

    def start(self, request: ExecRequest) -> FakeRunning:
        """Record the request; ``finish`` answers like the collector (module docstring)."""
        self._check_open()
        self.requests.append(request)
        return FakeRunning(self, request)

    def ran(self, needle: str) -> list[ExecRequest]:
        """The recorded requests whose argv (joined by spaces) contains ``needle``."""
        return [r for r in self.requests if needle in " ".join(r.argv)]

    def _harness(self, request: ExecRequest) -> ExecResult:
        argv = list(request.argv)
        shell = argv[2] if argv[:2] == ["sh", "-c"] and len(argv) > 2 else ""
        guard = next((i for i, a in enumerate(argv[:-1]) if a.endswith("guard.py")), None)
        action = argv[guard + 1] if guard is not None else ""
        if "run_pytest.py" in shell:  # before "sweep": the same exec sweeps after pytest
            return self._pytest(request)
        if "DELTARUN_HIDDEN_TEST" in request.env:
            verdict = self.factory.verdict
            if verdict == "timeout":
                return exec_result(None, timed_out=True)
            return exec_result(0 if verdict == "pass" else 1, f"fake test: {verdict}\n".encode())
        if " apply " in shell or argv[:2] == ["stat", "-f"]:
            return exec_result(0, b"4096 1000000 1000000\n")
        if " diff --cached " in shell:
            return self._capped(request, self.patch)
        if argv[:2] == ["tar", "-x"] and request.stdin is not None:
            self._unpack(argv[argv.index("-C") + 1], request.stdin)
            return exec_result(0)
        if action == "run":
            if request.stdin:  # the report's copy, at the path on its standard input
                self.files[request.stdin.decode().strip()] = GUARD_REPORT
            if request.separate_stderr:
                return exec_result(0, stderr=GUARD_REPORT)
            return exec_result(0, GUARD_REPORT)
        if action == "sweep":
            return exec_result(0, b"deltarun-guard: swept=0\n")
        if action == "census":
            return exec_result(0, b"deltarun-guard: live=0\n")
        if any(a.endswith("image_modules.py") for a in argv):
            answer = {
                "modules": list(self.factory.modules),
                "pytest_plugins": [],
                "bytecode": [],
                "install_bytecode": [],
            }
            return self._capped(request, json.dumps(answer).encode())
        return exec_result(0)

    def _pytest(self, request: ExecRequest) -> ExecResult:
        """The verify phase's pytest, by verdict: the records the collector will give."""
        verdict = self.factory.verdict
        if verdict == "timeout":
            return exec_result(None, timed_out=True)
        self.channel = _line({"t": "start"})
        if verdict == "crash":
            return exec_result(1, b"fake pytest: crashed before reporting\n")
        spec = json.loads(request.stdin or b"{}")
        outcome = "passed" if verdict == "pass" else "failed"
        root = spec["rootdir"]
        planted = _canaries({k[len(root) + 1 :]: v for k, v in self.files.items()})
        tests = [
            entry if "::" in entry else f"{entry.rstrip('/')}::test_fake"
            for entry in spec["select"]
            if entry not in planted
        ]
        files = {t.split("::", 1)[0] for t in tests}
        items = [*tests, *(c for c in planted if c.split("::", 1)[0] in files)]
        failing = {c for c, fails in planted.items() if fails}
        modules = {f: f"{spec['rootdir']}/{f}" for f in files}
        records: list[dict[str, object]] = [{"t": "collected", "items": items, "modules": modules}]
        for item in items:
            result = "failed" if item in failing else outcome if item in tests else "passed"
            records += [
                {"t": "report", "n": item, "w": "setup", "o": "passed"},
                {"t": "report", "n": item, "w": "call", "o": result},
                {"t": "report", "n": item, "w": "teardown", "o": "passed"},
            ]
        status = 1 if failing or outcome == "failed" else 0
        records.append({"t": "finish", "status": status})
        self.channel += b"".join(_line(r) for r in records)
        return exec_result(status, f"fake pytest: {len(tests)} {outcome}\n".encode())

    def _capped(self, request: ExecRequest, stdout: bytes) -> ExecResult:
        return exec_result(
            0, stdout[: request.output_cap], truncated=len(stdout) > request.output_cap
        )

    def _check_open(self) -> None:
        if self.closed:
            raise SandboxError("the fake sandbox was used after its session closed")


class FakeRunning:
    """The collector a ``FakeSandbox`` started: gives the channel's records at ``finish``."""

    def __init__(self, sandbox: FakeSandbox, request: ExecRequest) -> None:
        self.sandbox = sandbox
        self.request = request

    def finish(self) -> ExecResult:
        data = self.sandbox.channel
        account = {"peer_pid": 7 if data else 0, "bytes": len(data), "truncated": False}
        result = exec_result(0, data, stderr=json.dumps(account).encode() + b"\n")
        return self.sandbox.engine_cut(self.request, result)


def _canaries(files: Mapping[str, bytes]) -> dict[str, bool]:
    """The harness's canaries in ``files`` (node id -> must fail): the test functions whose
    body needs nothing but builtins, run here to learn their outcome (the fake's own
    stand-in for pytest; the canaries' shapes are ``runner.grading.canaries._source``)."""
    found: dict[str, bool] = {}
    for path, data in files.items():
        if path.endswith(".py"):
            with LOCK:  # one parse at a time (runner.pyparse)
                found.update(_canaries_in(path, data))
    return found


def _canaries_in(path: str, data: bytes) -> dict[str, bool]:
    found: dict[str, bool] = {}
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError):
        return found
    scopes: list[tuple[str, list[ast.stmt]]] = [("", tree.body)]
    scopes += [(n.name, n.body) for n in tree.body if isinstance(n, ast.ClassDef)]
    for owner, body in scopes:
        for node in body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
                fails = _run_alone(node)
                if fails is not None:
                    middle = f"{owner}::" if owner else ""
                    found[f"{path}::{middle}{node.name}"] = fails
    return found


class _Self:
    def assertEqual(self, first: object, second: object) -> None:
        assert first == second


def _run_alone(node: ast.FunctionDef) -> bool | None:
    """Whether a function of builtins alone fails (None when it needs anything else)."""
    module = ast.Module(body=list(node.body), type_ignores=[])
    names = {n.id for n in ast.walk(module) if isinstance(n, ast.Name)}
    assigned = {
        n.id for n in ast.walk(module) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }
    if names - assigned - {"sum", "len", "self"}:
        return None
    scope: dict[str, object] = {"__builtins__": {"sum": sum, "len": len}, "self": _Self()}
    try:
        exec(compile(module, "<canary>", "exec"), scope)
    except AssertionError:
        return True
    except Exception:
        return None
    return False


def _line(record: dict[str, object]) -> bytes:
    return b"\n" + json.dumps(record).encode() + b"\n"


class FakeSession:
    """The context manager ``FakeSandboxFactory.open`` returns; closes its sandbox on exit."""

    def __init__(self, sandbox: FakeSandbox) -> None:
        self.sandbox = sandbox

    def __enter__(self) -> FakeSandbox:
        return self.sandbox

    def __exit__(self, *exc_info: object) -> None:
        self.sandbox.closed = True


class FakeSandboxFactory:
    """Opens ``FakeSandbox``es that share one ``script``; keeps them in ``opened``, in order.

    ``verdict`` decides the verify phase's test command; ``modules`` is what
    ``image_modules.py`` lists; ``model_base_url`` and ``gateway_calls`` are what a
    sandbox opened with ``model_access`` reports. All can be set between trials.
    """

    def __init__(
        self,
        script: Script | None = None,
        image_digest: str = "sha256:fake",
        *,
        verdict: Verdict = "fail",
        modules: tuple[str, ...] = DEFAULT_MODULES,
    ) -> None:
        self.script = script
        self.image_digest = image_digest
        self.verdict: Verdict = verdict
        self.modules = modules
        self.model_base_url: str | None = None
        self.gateway_calls: list[ModelCall] = []
        self.opened: list[FakeSandbox] = []

    @property
    def specs(self) -> list[SandboxSpec]:
        """The spec of every sandbox opened, in order."""
        return [sandbox.spec for sandbox in self.opened]

    def open(self, spec: SandboxSpec) -> FakeSession:
        """A session over a fresh ``FakeSandbox`` (recorded in ``opened`` at once)."""
        sandbox = FakeSandbox(self, spec)
        self.opened.append(sandbox)
        return FakeSession(sandbox)


def _implements(
    factory: FakeSandboxFactory, sandbox: FakeSandbox
) -> tuple[SandboxFactory, Sandbox]:
    """Never called: mypy checks here that the fakes implement the protocols."""
    return factory, sandbox
