"""Reads from a sandbox end by its limits alone: never by silence, never by a file's size.

Three properties (issue 23, items 6-8): a command may be silent for as long as its
limit allows, whatever the engine client's read timeout; a command the sandbox holds
past its limit (its ``timeout`` stopped) is a timeout that kills the container, and
only an engine that does not answer is infrastructure; a file is read up to its cap
and within a bounded time, however large it says it is. Unit tests with fakes first,
then the real engine.
"""

from __future__ import annotations

import base64
import io
import json
import socket
import tarfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import docker
import docker.errors
import pytest

from runner.errors import SandboxError
from runner.sandbox import copy_out, exec_io
from runner.sandbox.base import ExecRequest, Limits, SandboxSpec
from runner.sandbox.docker import DockerSandbox, DockerSandboxFactory
from runner.sandbox.exec_io import Verdict, Watchdog, collect_frames, frames
from runner.trees.archives import TAR_SLACK, read_capped_tar_file
from tests.helpers import PY_IMAGE

CHUNK = 1 << 16
HANG_BOUND_S = 60.0  # a hang guard, not a speed assertion


def tar_header(name: str, size: int) -> bytes:
    """The header blocks of one regular file of ``size`` bytes (PAX past 8 GiB)."""
    info = tarfile.TarInfo(name)
    info.size = size
    info.mode = 0o644
    return info.tobuf(format=tarfile.PAX_FORMAT)


class Endless:
    """A tar stream of one huge file that never ends: counts what was taken, and whether
    it was closed."""

    def __init__(self, name: str, size: int) -> None:
        self.header = tar_header(name, size)
        self.taken = 0
        self.closed = False

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield self.header
            while True:
                self.taken += CHUNK
                yield b"x" * CHUNK
        finally:
            self.closed = True


# --- the capped tar reader ------------------------------------------------------------


def test_an_endless_tar_stream_is_read_to_the_cap_and_closed() -> None:
    stream = Endless("answer.json", 80 << 30)
    chunks = iter(stream)
    data, truncated = read_capped_tar_file(chunks, "answer.json", 1000)
    assert data == b"x" * 1000 and truncated
    assert stream.taken <= 1000 + TAR_SLACK + CHUNK
    assert stream.closed


def test_a_stream_longer_than_its_header_says_stops_at_the_cap() -> None:
    """The header says 10 bytes (the stat lied, or the file grew): still at most the cap."""
    stream = Endless("f", 10)
    data, truncated = read_capped_tar_file(iter(stream), "f", 100)
    assert data == b"x" * 10 and not truncated
    assert stream.taken <= 100 + TAR_SLACK + CHUNK


@pytest.mark.parametrize(
    ("size", "truncated"), [(0, False), (99, False), (100, False), (101, True)]
)
def test_small_files_are_read_whole_up_to_the_cap(size: int, truncated: bool) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo("f")
        info.size = size
        archive.addfile(info, io.BytesIO(b"y" * size))
    raw = buffer.getvalue()
    pieces = [raw[i : i + 7] for i in range(0, len(raw), 7)]
    assert read_capped_tar_file(pieces, "f", 100) == (b"y" * min(size, 100), truncated)


# --- copy_out: stat, cap and time, with a fake engine -----------------------------------


class FakeResponse:
    """An archive response: a stat header and a body that may never end."""

    def __init__(self, status: int, stat: dict[str, Any] | None, body: Any) -> None:
        self.status_code = status
        self.headers: dict[str, bytes] = {}
        if stat is not None:
            self.headers[copy_out.STAT_HEADER] = base64.b64encode(json.dumps(stat).encode())
        self.body = body
        self.closed = threading.Event()
        self.raw = None

    def iter_content(self, size: int) -> Iterator[bytes]:
        yield from self.body(self)

    def close(self) -> None:
        self.closed.set()


class FakeClient:
    base_url = "http+docker://localhost"
    api_version = "1.44"
    timeout = 60

    def __init__(self, response: FakeResponse) -> None:
        self.response = response

    def get(self, url: str, **kwargs: Any) -> FakeResponse:
        return self.response


def test_an_oversized_stat_is_truncated_and_the_body_is_never_drained() -> None:
    stream = Endless("big", 80 << 30)
    response = FakeResponse(200, {"name": "big", "size": 80 << 30, "mode": 0o644}, lambda r: stream)
    data, truncated = copy_out.read_file(FakeClient(response), "c", "/io/big", 512)  # type: ignore[arg-type]
    assert truncated and data == b"x" * 512
    assert stream.taken <= 512 + TAR_SLACK + CHUNK and response.closed.is_set()


def test_a_lying_stat_still_stops_at_the_cap() -> None:
    stream = Endless("f", 80 << 30)
    response = FakeResponse(200, {"name": "f", "size": 3, "mode": 0o644}, lambda r: stream)
    data, truncated = copy_out.read_file(FakeClient(response), "c", "/io/f", 512)  # type: ignore[arg-type]
    assert truncated and len(data) == 512
    assert stream.taken <= 512 + TAR_SLACK + CHUNK and response.closed.is_set()


def test_a_directory_or_a_missing_path_is_never_streamed() -> None:
    never = FakeResponse(200, {"name": "d", "size": 4096, "mode": (1 << 31) | 0o755}, None)
    assert copy_out.read_file(FakeClient(never), "c", "/io/d", 512) == (b"", False)  # type: ignore[arg-type]
    missing = FakeResponse(404, None, None)
    assert copy_out.read_file(FakeClient(missing), "c", "/io/x", 512) == (None, False)  # type: ignore[arg-type]


def test_an_engine_that_stops_sending_ends_the_read_in_bounded_time() -> None:
    def stuck(response: FakeResponse) -> Iterator[bytes]:
        yield tar_header("f", 10)
        if response.closed.wait(HANG_BOUND_S):
            raise OSError("the response was closed under the read")

    response = FakeResponse(200, {"name": "f", "size": 10, "mode": 0o644}, stuck)
    began = time.monotonic()
    with pytest.raises(SandboxError, match="did not copy /io/f out within"):
        copy_out.read_file(FakeClient(response), "c", "/io/f", 512, within_s=0.5)  # type: ignore[arg-type]
    assert time.monotonic() - began < HANG_BOUND_S


# --- the exec stream: silence is no failure -------------------------------------------


def frame(stream: int, payload: bytes) -> bytes:
    return bytes([stream, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload


def test_a_silent_stream_is_read_until_it_ends_not_until_its_socket_times_out() -> None:
    reader, writer = socket.socketpair()
    reader.settimeout(0.05)

    def speak_late() -> None:
        time.sleep(0.5)  # ten socket timeouts of silence
        writer.sendall(frame(1, b"late\n") + frame(2, b"err\n"))
        writer.close()

    threading.Thread(target=speak_late, daemon=True).start()
    assert collect_frames(frames(reader, lambda: False), 100, 0) == (b"late\nerr\n", False, b"")


def test_a_silent_stream_ends_when_the_watchdog_ends_it() -> None:
    reader, writer = socket.socketpair()
    reader.settimeout(0.05)
    ended = threading.Event()
    threading.Timer(0.3, ended.set).start()
    assert collect_frames(frames(reader, ended.is_set), 100, 0) == (b"", False, b"")
    writer.close()


# --- the watchdog's verdict, with a fake engine ---------------------------------------


class FakeEngine:
    """Answers the watchdog's questions as told; ``hang`` never answers."""

    def __init__(
        self, running: bool = True, paused: bool = False, hang: bool = False, refusals: int = 0
    ) -> None:
        self.running = running
        self.paused = paused
        self.hang = hang
        self.refusals = refusals
        self.killed = threading.Event()

    def exec_inspect(self, exec_id: str) -> dict[str, Any]:
        if self.hang:
            threading.Event().wait(HANG_BOUND_S)
        if self.refusals:
            self.refusals -= 1
            raise docker.errors.APIError("500 Server Error: busy")
        return {"Running": self.running}

    def inspect_container(self, container: str) -> dict[str, Any]:
        return {"State": {"Running": True, "Paused": self.paused}}

    def kill(self, container: str) -> None:
        self.killed.set()


@pytest.fixture
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exec_io, "PROBE_S", 1.0)
    monkeypatch.setattr(exec_io, "STREAM_GRACE_S", 0.3)


def fired(engine: FakeEngine, exec_id: str | None = "e") -> tuple[Watchdog, socket.socket]:
    """A watchdog fired on a silent stream; the stream's other end."""
    reader, writer = socket.socketpair()
    reader.settimeout(0.05)
    watchdog = Watchdog(engine, "c", 0.05)  # type: ignore[arg-type]
    if exec_id is not None:
        watchdog.watch(exec_id)
    watchdog.attach(reader)
    list(frames(reader, watchdog.ended))  # returns once the watchdog ended the stream
    return watchdog, writer


@pytest.mark.usefixtures("quick")
def test_a_command_the_engine_says_still_runs_is_held_and_its_container_killed() -> None:
    engine = FakeEngine(running=True)
    watchdog, _ = fired(engine)
    assert watchdog.finish() is Verdict.HELD
    assert engine.killed.is_set()


@pytest.mark.usefixtures("quick")
def test_a_refusal_is_asked_again_before_the_engine_is_blamed() -> None:
    engine = FakeEngine(running=True, refusals=1)
    watchdog, _ = fired(engine)
    assert watchdog.finish() is Verdict.HELD


@pytest.mark.usefixtures("quick")
@pytest.mark.parametrize(
    "engine",
    [FakeEngine(hang=True), FakeEngine(paused=True)],
    ids=["no-answer", "paused"],
)
def test_an_engine_that_does_not_answer_or_a_paused_container_is_a_stall(
    engine: FakeEngine,
) -> None:
    watchdog, _ = fired(engine)
    assert watchdog.finish() is Verdict.STALLED


@pytest.mark.usefixtures("quick")
def test_without_an_exec_the_watchdog_can_only_blame_the_engine() -> None:
    watchdog, _ = fired(FakeEngine(), exec_id=None)
    assert watchdog.finish() is Verdict.STALLED


@pytest.mark.usefixtures("quick")
def test_an_ended_command_whose_stream_never_ends_is_a_stall() -> None:
    """What the stalling proxy of tests/adversarial/test_docker_stall.py does."""
    reader, writer = socket.socketpair()
    reader.settimeout(0.05)
    watchdog = Watchdog(FakeEngine(running=False), "c", 0.05)  # type: ignore[arg-type]
    watchdog.watch("e")
    watchdog.attach(reader)
    list(frames(reader, watchdog.ended))
    assert watchdog.finish() is Verdict.STALLED
    writer.close()


@pytest.mark.usefixtures("quick")
def test_an_ended_command_whose_stream_follows_is_no_verdict_against_anyone() -> None:
    reader, writer = socket.socketpair()
    reader.settimeout(0.05)
    watchdog = Watchdog(FakeEngine(running=False), "c", 0.05)  # type: ignore[arg-type]
    watchdog.watch("e")
    watchdog.attach(reader)
    threading.Timer(0.15, lambda: (writer.sendall(frame(1, b"done")), writer.close())).start()
    assert collect_frames(frames(reader, watchdog.ended), 100, 0)[0] == b"done"
    assert watchdog.finish() is Verdict.ENDED


# --- the real engine -------------------------------------------------------------------


def spec(job: str) -> SandboxSpec:
    return SandboxSpec(
        image=PY_IMAGE,
        limits=Limits(memory_bytes=512 << 20, nano_cpus=10**9, pids=256, workspace_bytes=64 << 20),
        lifetime_s=300,
        labels={"run": "sandbox-io-test", "job": job},
    )


@pytest.fixture
def sandbox(docker_api: Any) -> Iterator[DockerSandbox]:
    with DockerSandboxFactory(docker_api).open(spec("io")) as opened:
        yield opened


def impatient(sandbox: DockerSandbox, timeout: int = 3) -> DockerSandbox:
    """The same container through a client whose read timeout is ``timeout`` seconds (the
    sandbox itself was made with the usual client: creating it may take longer)."""
    client = docker.APIClient(version="auto", timeout=timeout, **docker.utils.kwargs_from_env())
    return DockerSandbox(DockerSandboxFactory(client), sandbox.container, sandbox.image_digest)


@pytest.mark.docker
def test_silence_longer_than_the_client_timeout_is_no_failure(sandbox: DockerSandbox) -> None:
    quiet = impatient(sandbox)
    result = quiet.run(ExecRequest(argv=["sh", "-c", "sleep 6; echo done; exit 3"], timeout_s=30))
    assert (result.exit_code, result.output, result.timed_out) == (3, b"done\n", False)


@pytest.mark.docker
def test_input_read_after_a_long_silence_still_arrives_whole(sandbox: DockerSandbox) -> None:
    """More input than the socket buffers hold, read only after the client's timeout."""
    quiet = impatient(sandbox)
    data = b"z" * (4 << 20)
    result = quiet.run(
        ExecRequest(
            argv=["sh", "-c", "sleep 5; wc -c; echo err >&2"],
            timeout_s=30,
            stdin=data,
            separate_stderr=True,
        )
    )
    assert result.exit_code == 0 and result.output.strip() == str(len(data)).encode()
    assert result.stderr == b"err\n"


@pytest.mark.docker
def test_a_stopped_timeout_is_a_timeout_and_the_dead_sandbox_answers_at_once(
    sandbox: DockerSandbox, docker_api: Any
) -> None:
    began = time.monotonic()
    result = sandbox.run(
        ExecRequest(argv=["sh", "-c", "echo before; kill -STOP $PPID; sleep 600"], timeout_s=2)
    )
    assert time.monotonic() - began < 2 + HANG_BOUND_S
    assert result.timed_out and result.exit_code is None and result.output == b"before\n"
    state = docker_api.inspect_container(sandbox.container)["State"]
    assert not state["Running"]
    began = time.monotonic()
    again = sandbox.run(ExecRequest(argv=["true"], timeout_s=30))
    beside = sandbox.start(ExecRequest(argv=["true"], timeout_s=30)).finish()
    assert again.timed_out and beside.timed_out and again.exit_code is None
    assert sandbox.read_file("/etc/hostname", 100) == (None, False)
    assert time.monotonic() - began < 1.0  # no engine call: nothing left to wait for


@pytest.mark.docker
def test_a_sparse_80_gib_file_is_read_to_its_cap_only(sandbox: DockerSandbox) -> None:
    made = sandbox.run(
        ExecRequest(argv=["sh", "-c", "truncate -s 80G /io/big && mkdir /io/dir"], timeout_s=30)
    )
    assert made.exit_code == 0, made.output
    began = time.monotonic()
    assert sandbox.read_file("/io/big", 4096) == (b"\0" * 4096, True)
    assert sandbox.read_file("/io/dir", 4096) == (b"", False)
    assert sandbox.read_file("/io/absent", 4096) == (None, False)
    assert time.monotonic() - began < HANG_BOUND_S


@pytest.mark.docker
def test_a_small_file_is_read_whole(sandbox: DockerSandbox) -> None:
    made = sandbox.run(ExecRequest(argv=["sh", "-c", "printf hello > /io/small"], timeout_s=30))
    assert made.exit_code == 0
    assert sandbox.read_file("/io/small", 5) == (b"hello", False)
    assert sandbox.read_file("/io/small", 4) == (b"hell", True)
