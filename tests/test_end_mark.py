"""A harness command's output is read as an answer only when it arrived whole.

Docker can end an exec's stream before the command's last output and report the exit as
if nothing happened (moby/moby#27289; seen here under load as a fixing agent's empty
patch, graded a miss). ``ExecRequest.end_mark`` has the sandbox print a fresh mark after
the command on each stream read; a stream without it is ``cut_short`` and never an
answer: the patch, the verify sandbox's size and the image probes run again
(``run_whole``), the collector's records make the trial an error to run again.

The engine's race cannot be called up on demand, so the real-engine tests lose a
stream's end where the race loses it, in the reading of the exec's stream, and show the
mark's other side: a whole output comes back exactly as without the mark (exit status,
streams, order, caps). A command whose shell is killed before it prints the mark (an
agent that fills its sandbox's memory has the OOM killer end the harness's commands) is
a failed command, never a cut: else the agent's miss becomes an error to run again. The
callers' answer to a cut is tested on the fake, whose "engine" cuts on request.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from runner.errors import SandboxError, UserError
from runner.records import Outcome
from runner.sandbox import end_mark, preflight
from runner.sandbox.base import ROOT_USER, ExecRequest, ExecResult, Limits, SandboxSpec
from runner.sandbox.docker import DockerSandbox, DockerSandboxFactory
from runner.sandbox.exec_io import collect_frames, stream_exec
from runner.sandbox.fake import FakeSandbox, FakeSandboxFactory, Script
from runner.sandbox.image_build import DockerImageBuilder
from runner.sandbox.preflight import check_harness
from runner.sandbox.python_version import python_version
from runner.trial.workspace import take_patch
from tests.helpers import PY_IMAGE
from tests.test_trial_logic import GOLD, applies_diff, factory, run_one, suite

MARK = b"deltarun-end-0123456789abcdef01234567"


def marked(**kwargs: Any) -> ExecRequest:
    return ExecRequest(argv=["true"], end_mark=True, **kwargs)


# --- the mark, pure ------------------------------------------------------------------


def test_marks_are_fresh_and_the_command_keeps_its_arguments() -> None:
    assert end_mark.new_mark() != end_mark.new_mark()
    request = ExecRequest(argv=["printf", "%s", "a b"], separate_stderr=True, end_mark=True)
    argv = end_mark.argv_of(request, MARK)
    assert argv[:2] == ["sh", "-c"] and argv[-3:] == ["printf", "%s", "a b"]
    assert MARK.decode() in argv
    assert end_mark.argv_of(request, None) == ["printf", "%s", "a b"]


@pytest.mark.parametrize("separate", [False, True])
def test_a_whole_output_loses_its_marks_and_nothing_else(separate: bool) -> None:
    request = marked(output_cap=10, stderr_cap=10, separate_stderr=separate)
    err = b"oops" + MARK if separate else b""
    got = end_mark.unmarked(request, MARK, b"0123456789" + MARK, False, err)
    assert got == end_mark.Unmarked(b"0123456789", False, b"oops" if separate else b"", False)


@pytest.mark.parametrize(
    ("output", "stderr"),
    [
        (b"", b""),  # the whole stream lost, as seen
        (b"diff --git a/x", MARK),  # stdout's end lost
        (b"data" + MARK, b""),  # stderr's end lost
        (b"data" + MARK[:-1], MARK),  # the mark itself cut
        (MARK + b"more", MARK),  # a mark inside the output is no end
    ],
)
def test_a_stream_without_its_mark_at_its_end_is_cut_short(output: bytes, stderr: bytes) -> None:
    request = marked(output_cap=1 << 10, stderr_cap=1 << 10, separate_stderr=True)
    assert end_mark.unmarked(request, MARK, output, False, stderr).cut_short


def test_an_output_past_its_cap_is_truncated_not_cut() -> None:
    """Its mark came after the cap: unknowable, so truncated, as without a mark."""
    request = marked(output_cap=4, stderr_cap=4, separate_stderr=True)
    room = end_mark.with_room(request, MARK)
    assert (room.output_cap, room.stderr_cap) == (4 + len(MARK), 4 + len(MARK))
    got = end_mark.unmarked(request, MARK, b"x" * room.output_cap, True, b"y" * room.stderr_cap)
    assert got == end_mark.Unmarked(b"xxxx", True, b"yyyy", False)


def test_a_killed_command_is_no_cut_and_keeps_to_its_caps() -> None:
    request = marked(output_cap=4, stderr_cap=4, separate_stderr=True)
    got = end_mark.unmarked(request, MARK, b"0123456", False, b"abcdefg", killed=True)
    assert got == end_mark.Unmarked(b"0123", True, b"abcd", False)
    # Its shell may also have lived to print the mark (the command it ran was killed).
    got = end_mark.unmarked(request, MARK, b"01" + MARK, False, b"ab" + MARK, killed=True)
    assert got == end_mark.Unmarked(b"01", False, b"ab", False)


@pytest.mark.parametrize(
    ("exit_code", "timed_out", "may_lack"),
    [
        *[(0, False, False), (1, False, False), (124, False, False), (None, False, False)],
        *[(128 + 9, False, True), (128 + 7, False, True), (124, True, True), (137, True, True)],
        *[(125, False, True), (126, False, True), (127, False, True)],
    ],
)
def test_only_a_signal_a_timeout_or_no_shell_explains_a_missing_mark(
    exit_code: int | None, timed_out: bool, may_lack: bool
) -> None:
    """Below 125 the shell ran to its end, and printed the mark before it exited."""
    assert end_mark.may_lack_mark(exit_code, timed_out) is may_lack


# --- the real engine -----------------------------------------------------------------

SPEC = SandboxSpec(
    image=PY_IMAGE,
    limits=Limits(memory_bytes=256 << 20, nano_cpus=10**9, pids=64, workspace_bytes=16 << 20),
    lifetime_s=300,
    labels={"run": "end-mark-test", "job": "exec"},
)


@pytest.fixture(scope="module")
def sandbox(docker_api: Any) -> Iterator[DockerSandbox]:
    with DockerSandboxFactory(docker_api).open(SPEC) as opened:
        yield opened


def sh(script: str, **kwargs: Any) -> ExecRequest:
    return ExecRequest(argv=["sh", "-c", script], user=ROOT_USER, end_mark=True, **kwargs)


@pytest.mark.docker
def test_a_whole_output_arrives_as_without_the_mark(sandbox: DockerSandbox) -> None:
    script = "printf out; printf err >&2; exit 3"
    got = sandbox.run(sh(script, separate_stderr=True))
    plain = sandbox.run(ExecRequest(["sh", "-c", script], user=ROOT_USER, separate_stderr=True))
    assert (got.exit_code, got.output, got.stderr, got.cut_short) == (3, b"out", b"err", False)
    assert (plain.exit_code, plain.output, plain.stderr) == (3, b"out", b"err")


@pytest.mark.docker
def test_joined_streams_keep_the_order_the_command_wrote_them_in(sandbox: DockerSandbox) -> None:
    got = sandbox.run(sh("for i in 1 2 3; do echo o$i; echo e$i >&2; done"))
    assert got.output == b"o1\ne1\no2\ne2\no3\ne3\n" and not got.cut_short


@pytest.mark.docker
@pytest.mark.parametrize(("size", "truncated"), [(4096, False), (4097, True)])
def test_an_output_of_its_cap_is_whole_and_one_byte_more_is_truncated(
    sandbox: DockerSandbox, size: int, truncated: bool
) -> None:
    got = sandbox.run(sh(f"head -c {size} /dev/zero", output_cap=4096, separate_stderr=True))
    assert (got.output, got.output_truncated, got.cut_short) == (b"\0" * 4096, truncated, False)


def losing_the_end(read: Any, keep: int) -> Any:
    """``read`` (the sandbox's reader of an exec's stream) losing all but the first
    ``keep`` bytes of the output, as the engine's race does."""

    def lossy(*args: Any) -> Any:
        got = read(*args)
        if isinstance(got, tuple):  # collect_frames: (output, truncated, stderr)
            return (got[0][:keep], *got[1:])
        return replace(got, output=got.output[:keep])  # stream_exec: Streamed

    return lossy


@pytest.mark.docker
@pytest.mark.parametrize("keep", [0, 12])
def test_a_stream_that_loses_its_end_is_cut_short(
    sandbox: DockerSandbox, monkeypatch: pytest.MonkeyPatch, keep: int
) -> None:
    """The command ran to its end and exited 0; its output stream ended early."""
    import runner.sandbox.docker as docker_module

    monkeypatch.setattr(docker_module, "stream_exec", losing_the_end(stream_exec, keep))
    got = sandbox.run(sh("echo 'diff --git a/x b/x'", separate_stderr=True))
    assert (got.exit_code, got.cut_short, got.timed_out) == (0, True, False)
    with pytest.raises(SandboxError, match="cut the output of the probe short 3 times"):
        end_mark.run_whole(sandbox, sh("echo answer"), "the probe")


@pytest.mark.docker
def test_a_shell_killed_before_its_mark_is_a_failed_command_not_a_cut(
    sandbox: DockerSandbox,
) -> None:
    """The shell that prints the mark is killed by a signal after the command wrote (as the
    OOM killer ends it in a sandbox an agent filled): a failed command, taken once."""
    request = sh("echo 'diff --git a/x b/x'; kill -9 $PPID", separate_stderr=True)
    got = end_mark.run_whole(sandbox, request, "the patch command")
    assert (got.exit_code, got.cut_short, got.timed_out) == (137, False, False)
    assert got.output == b"diff --git a/x b/x\n"


@pytest.mark.docker
def test_a_timed_out_command_is_a_timeout_not_a_cut(sandbox: DockerSandbox) -> None:
    got = sandbox.run(sh("echo started; sleep 30", timeout_s=1, separate_stderr=True))
    assert got.timed_out and not got.cut_short


@pytest.mark.docker
def test_a_command_beside_others_proves_its_end_too(sandbox: DockerSandbox) -> None:
    whole = sandbox.start(sh("cat >/dev/null; printf records; printf account >&2", stdin=b""))
    assert whole.finish() == ExecResult(0, b"recordsaccount", False, False)  # joined, in order
    killed = sandbox.start(sh("cat >/dev/null; printf records; kill -9 $PPID")).finish()
    assert (killed.exit_code, killed.output, killed.cut_short) == (137, b"records", False)


@pytest.mark.docker
def test_a_command_beside_others_that_loses_its_end_is_cut_short(
    sandbox: DockerSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    import runner.sandbox.running as running_module

    monkeypatch.setattr(running_module, "collect_frames", losing_the_end(collect_frames, 3))
    got = sandbox.start(sh("cat >/dev/null; printf records", separate_stderr=True)).finish()
    assert (got.exit_code, got.output, got.cut_short) == (0, b"rec", True)


# --- what the harness does with a cut ---------------------------------------------------


def cut_in_verify(needle: str) -> Script:
    """Applies the gold diff; in the verify sandbox, the "engine" cuts the next command with
    an end mark short once a command containing ``needle`` comes."""

    def script(request: ExecRequest, sandbox: FakeSandbox) -> ExecResult | None:
        if sandbox.spec.workspace_root_owned and needle in " ".join(request.argv):
            sandbox.cut_outputs = 1
        return applies_diff(request, sandbox)

    return script


PATCH = b"diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1 +1 @@\n-a\n+b\n"


def diffs(sandbox: FakeSandbox) -> int:
    return sum(" diff --cached " in " ".join(r.argv) for r in sandbox.requests)


@pytest.mark.parametrize("cut", [0, 1, end_mark.TRIES - 1])
def test_a_patch_cut_short_is_taken_again_and_arrives_whole(cut: int) -> None:
    with FakeSandboxFactory().open(SPEC) as sandbox:
        assert isinstance(sandbox, FakeSandbox)
        sandbox.patch, sandbox.cut_outputs = PATCH, cut
        assert take_patch(sandbox) == (PATCH, False, None)
        assert diffs(sandbox) == cut + 1


def test_an_empty_patch_is_an_empty_patch() -> None:
    with FakeSandboxFactory().open(SPEC) as sandbox:
        assert isinstance(sandbox, FakeSandbox)
        assert take_patch(sandbox) == (b"", False, None)
        assert diffs(sandbox) == 1


def test_a_patched_trees_size_cut_short_is_measured_again(tmp_path: Path) -> None:
    sandboxes = factory(cut_in_verify("tar -x"), verdict="pass")
    trial = run_one(suite(tmp_path, [GOLD]), "gold", sandboxes)
    assert trial.outcome is Outcome.SUCCESS and trial.passed, trial
    verify = sandboxes.opened[-1]
    assert [r.argv[:2] for r in verify.requests if r.end_mark][:2] == [["sh", "-c"], ["stat", "-f"]]


def test_the_collectors_records_cut_short_are_an_error_never_a_miss(tmp_path: Path) -> None:
    """A correct agent's records lost are no failing tests: the trial runs again."""
    sandboxes = factory(cut_in_verify("run_pytest.py"), verdict="pass")
    trial = run_one(suite(tmp_path, [GOLD]), "gold", sandboxes)
    assert trial.outcome is Outcome.ERROR and not trial.passed
    assert trial.error is not None and "cut the collector's output short" in trial.error


def test_a_patch_cut_short_every_time_is_an_error_never_an_empty_patch(tmp_path: Path) -> None:
    def cut_patches(request: ExecRequest, sandbox: FakeSandbox) -> ExecResult | None:
        if " diff --cached " in " ".join(request.argv):
            sandbox.cut_outputs = 1
        return applies_diff(request, sandbox)

    trial = run_one(suite(tmp_path, [GOLD]), "gold", factory(cut_patches, verdict="pass"))
    assert trial.outcome is Outcome.ERROR and trial.patch == ""
    assert (
        trial.error is not None and f"the patch command short {end_mark.TRIES} times" in trial.error
    )


def test_a_probe_cut_short_is_asked_again() -> None:
    answers: list[ExecResult] = [
        ExecResult(0, b"", False, False, cut_short=True),
        ExecResult(0, b"3.11.2\n", False, False),
    ]
    probes = FakeSandboxFactory(lambda request, box: answers.pop(0) if request.end_mark else None)
    assert python_version(probes, SPEC) == "3.11.2"
    assert not answers


def test_a_probe_never_whole_is_infrastructure_not_a_missing_python() -> None:
    """Read as it came, the empty answer said "no python3": a setup error stopping the run."""
    probes = FakeSandboxFactory(
        lambda request, box: ExecResult(0, b"", False, False, cut_short=True)
    )
    with pytest.raises(SandboxError, match="python3 version short 3 times"):
        python_version(probes, SPEC)


# --- the image's questions: a part of an answer is no answer --------------------------


class LosingClient:
    """The engine's client, losing the whole output of its first ``lose`` ``exec_start``s
    (the race as seen: an empty stream, exit 0)."""

    def __init__(self, client: Any, lose: int) -> None:
        self._client, self.lose = client, lose

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def exec_start(self, *args: Any, **kwargs: Any) -> Any:
        out = self._client.exec_start(*args, **kwargs)
        if self.lose > 0:
            self.lose -= 1
            return b""
        return out


@pytest.mark.docker
@pytest.mark.parametrize("lose", [0, 1, end_mark.TRIES - 1])
def test_the_harness_check_is_asked_again_when_its_answer_is_lost(
    sandbox: DockerSandbox, docker_api: Any, lose: int
) -> None:
    """A PATH directory in the workspace is refused however often the engine loses the
    answer first (an empty answer used to read as nothing wrong)."""
    client = LosingClient(docker_api, lose)
    with pytest.raises(UserError, match="a PATH directory /workspace"):
        check_harness(client, sandbox.container, PY_IMAGE, ("/workspace",))
    assert client.lose == 0


@pytest.mark.docker
def test_a_harness_check_whose_answer_never_arrives_is_no_pass(
    sandbox: DockerSandbox, docker_api: Any
) -> None:
    client = LosingClient(docker_api, end_mark.TRIES)
    with pytest.raises(SandboxError, match="harness check short 3 times"):
        check_harness(client, sandbox.container, PY_IMAGE, ("/workspace",))


@pytest.mark.docker
def test_a_lookup_or_probe_killed_midway_is_no_answer(
    sandbox: DockerSandbox, docker_api: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Their shell killed after a first line: that line is not what the image has."""
    monkeypatch.setattr(preflight, "LOOKUP", "echo half; kill -9 $$")
    with pytest.raises(SandboxError, match="lookup of the agent's commands ended 137"):
        preflight.missing_commands(sandbox, ["git", "half"])
    with pytest.raises(UserError, match=r"the probe could not run .*ended 137"):
        DockerImageBuilder(docker_api).probe(PY_IMAGE, "echo glibc 2.36; kill -9 $$")
