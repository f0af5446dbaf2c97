"""The guard's report line lost by the engine is read from the guard's copy, for the
install step as for the agent (``runner.sandbox.guard_run``), and a line that neither
arrived nor was copied is still the steps' doing. The guard itself, writing the copy,
is tried on the real engine in tests/test_guard.py; an agent hunting for the copy's
secret path, in tests/adversarial/test_agent_end.py."""

from __future__ import annotations

import pytest

from runner.grading.install_step import install
from runner.sandbox.base import ExecRequest, ExecResult, Limits, SandboxSpec
from runner.sandbox.fake import FakeSandbox, FakeSandboxFactory, exec_result

SPEC = SandboxSpec(
    image="deltarun/sandbox-python:bookworm",
    limits=Limits(memory_bytes=256 << 20, nano_cpus=10**9, pids=64, workspace_bytes=16 << 20),
    lifetime_s=60,
    labels={"run": "guard-copy", "job": "install"},
)
HOME = "/workspace/.deltarun-0123"


def installed(copy: bytes | None) -> tuple[str | None, bool, list[ExecRequest]]:
    """The install step when the guard's line never arrives; its copy says ``copy``."""

    def line_lost(request: ExecRequest, sandbox: FakeSandbox) -> ExecResult | None:
        if "run" in request.argv and request.stdin:
            if copy is not None:
                sandbox.files[request.stdin.decode().strip()] = copy
            return exec_result(0, b"installed\n", stderr=b"")
        return None

    with FakeSandboxFactory(line_lost).open(SPEC) as sandbox:
        assert isinstance(sandbox, FakeSandbox)
        done = install(sandbox, ["pip install -e ."], HOME, {"PATH": "/usr/bin"}, 60, 1 << 16)
        return done.reason, done.tampered, sandbox.requests


def test_an_install_steps_lost_report_is_read_from_the_copy() -> None:
    reason, tampered, requests = installed(b"deltarun-guard: mode=ptrace exit=0\n")
    assert (reason, tampered) == (None, False)
    [guarded] = [r for r in requests if r.stdin]
    assert guarded.stdin is not None
    assert guarded.stdin.startswith(f"{HOME}/guard-reports/.deltarun-guard-report-".encode())


@pytest.mark.parametrize(
    ("copy", "why"),
    [
        (None, "ended the harness's guard"),
        (b"deltarun-guard: mode=ptrace exit=0 stragglers=2\n", "survived the harness's guard"),
        (b"forged\n", "ended the harness's guard"),
    ],
)
def test_without_a_whole_copy_the_install_step_still_tampered(copy: bytes | None, why: str) -> None:
    reason, tampered, _ = installed(copy)
    assert tampered and reason is not None and why in reason


def test_a_census_cut_short_is_counted_again_not_an_error() -> None:
    """The census's "live=0" lost on the way: root counts again (``run_whole``)."""
    with FakeSandboxFactory().open(SPEC) as sandbox:
        assert isinstance(sandbox, FakeSandbox)
        sandbox.cut_outputs = 1
        done = install(sandbox, ["true"], HOME, {"PATH": "/usr/bin"}, 60, 1 << 16)
        assert (done.reason, done.tampered) == (None, False)
        assert len(sandbox.ran("guard.py census")) == 2 and sandbox.cut_outputs == 0
