"""The ``Sandbox`` interface: what a trial needs from an isolated machine, nothing more.

``execute_trial`` and the agents speak only this interface, so the orchestration
can be read (and reasoned about) without Docker in mind. The Docker adapter
lives in ``runner.sandbox.docker``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from runner.paths import AGENT_UID as AGENT_UID  # re-exported beside the rest of the contract

AGENT_USER = f"{AGENT_UID}:{AGENT_UID}"
ROOT_USER = "0:0"

WORKSPACE = "/workspace"
IO_DIR = "/io"
AGENT_DIR = "/opt/agent"
BASELINE_DIR = "/baseline"


@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandbox."""

    memory_bytes: int
    nano_cpus: int
    pids: int
    workspace_bytes: int
    tmp_bytes: int = 64 << 20
    io_bytes: int = 16 << 20
    nofile: int = 1024


@dataclass(frozen=True)
class ModelAccess:
    """``network: model-only``: the one model endpoint a sandbox may reach, through a gateway."""

    upstream: str  # the route's base_url
    api_key_env: str | None  # read on the worker; the key stays in the gateway
    egress_network: str  # the Docker network from which the gateway reaches the upstream
    budget_tokens: int | None = None  # input plus output tokens of the trial, at most
    budget_usd: float | None = None  # dollars of the trial, at most (needs ``price``)
    price: Mapping[str, float] | None = None  # input, output, cache_read, cache_write per 1M
    max_output_tokens: int | None = None  # a request's output maximum when it names none
    # The run's dollars on every machine (``budget.run_usd``, needs ``price``): the worker's
    # relay debits this gateway's spend to the run's account under the trial's run and arm
    # (runner.sandbox.gateway_relay). Never seen by the proxy or the agent.
    run_usd: float | None = None
    run_id: str | None = None
    arm: str | None = None
    # The route's shared rate limits (``rate_limits``: concurrent, requests and tokens per
    # minute, 0 for none) and its limiter's key (runner.sandbox.gateway_rates).
    rate_limits: tuple[int, int, int] | None = None
    rate_route: str | None = None


@dataclass(frozen=True)
class ModelCall:
    """One request a sandbox made to the model, as the gateway saw it.

    ``prompt_tokens`` counts every input token, cached or not; ``cache_read_tokens`` and
    ``cache_write_tokens`` are parts of it. ``tool_calls`` names the tool calls the answer
    asked for; ``budget_exhausted`` marks a request refused because the trial's budget was
    spent (it never reached the model)."""

    status: int
    model: str | None
    prompt_tokens: int
    completion_tokens: int
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    latency_ms: int = 0
    tool_calls: tuple[str, ...] = ()
    budget_exhausted: bool = False
    # Every model name the answer gave (each is held to the route lock), and what the
    # gateway could not take at its word (``estimated``, ``key_reflected``: runner.gateway).
    models: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class StagedTree:
    """A tree unpacked on the worker's host (``runner.trees.staging``: the fixture for
    ``/workspace``, its baseline for ``/baseline``), which a sandbox may mount copy-on-write
    instead of having it copied in."""

    path: Path
    footprint: int  # bytes the tree takes in a tmpfs: what a copy would use of the cap


@dataclass(frozen=True)
class SandboxSpec:
    """How to make one sandbox. ``labels`` are for the reaper, never visible inside."""

    image: str
    limits: Limits
    lifetime_s: float
    labels: Mapping[str, str]
    with_agent_dir: bool = False
    with_io: bool = True  # /io and /baseline: only the agent phase needs them
    # The verify phase: /workspace itself root-owned and sticky, so the test's uid can add
    # files at the top but never rename or remove what root put there (hidden tests).
    workspace_root_owned: bool = False
    oci_runtime: str | None = None
    model_access: ModelAccess | None = None  # set: the sandbox reaches the model, nothing else
    # The image ID the run pins for ``image``: the sandbox is made from exactly that image,
    # whatever the tag names on this engine now (a tag can be moved; an ID is the content).
    image_id: str | None = None
    # Staged trees by mount point (``WORKSPACE``, ``BASELINE_DIR``), asked for only by a
    # sandbox that can mount them as copy-free views (``runner.sandbox.overlay``); it names
    # those it mounted in ``Sandbox.prefilled``, the harness copies the rest in.
    staged_trees: Mapping[str, Callable[[], StagedTree | None]] = field(default_factory=dict)


@dataclass(frozen=True)
class ExecResult:
    """How a command in the sandbox ended."""

    exit_code: int | None
    output: bytes
    output_truncated: bool
    timed_out: bool
    oom_killed: bool = False
    stderr: bytes = b""  # only with ``ExecRequest.separate_stderr``; otherwise in ``output``
    # Only with ``ExecRequest.end_mark``: the command ended, but the engine did not deliver
    # its output whole (``runner.sandbox.end_mark``). What arrived is no answer.
    cut_short: bool = False


@dataclass(frozen=True)
class ExecRequest:
    """A command to run in the sandbox, bounded by ``timeout_s`` inside and outside."""

    argv: Sequence[str]
    user: str = AGENT_USER
    workdir: str = WORKSPACE
    env: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 60.0
    output_cap: int = 1 << 20
    stdin: bytes | None = None  # written to the command's standard input, then closed
    # False: ``output`` holds stdout and stderr as they came. True: ``output`` is stdout
    # alone and ``ExecResult.stderr`` the rest (capped at ``stderr_cap``), for a command
    # whose stdout is data (a patch) or whose stderr only the harness may write.
    separate_stderr: bool = False
    stderr_cap: int = 1 << 16
    # The command runs code deltarun does not control (the agent's program, a tool call's
    # command, the code under test). From then on, a sandbox that its own state ends (its
    # pids or memory full, its runtime dead of it) makes the trial the agent's, never an
    # infrastructure error (``SandboxLost``; the rule is ``runner.sandbox.blame``).
    untrusted: bool = False
    # The harness reads the output as an answer (a patch, a size, the collector's records):
    # the sandbox proves it arrived whole, or says ``ExecResult.cut_short``
    # (``runner.sandbox.end_mark``). Without ``separate_stderr`` the command's stderr is
    # then joined to its stdout inside the sandbox, in the order it wrote them.
    end_mark: bool = False


class SandboxLost(Exception):
    """The sandbox ended by its own state after untrusted code started in it: raised by
    the command (or copy) that found it so, and by every later one on that sandbox.

    Not a ``DeltarunError``: no run stops and nothing is infrastructure here. The trial
    is the agent's (``runner.trial.execute`` makes it a miss with ``reason``)."""

    def __init__(self, reason: str, *, oom_killed: bool = False, exit_code: int | None = None):
        super().__init__(reason)
        self.reason = reason
        self.oom_killed = oom_killed
        self.exit_code = exit_code


class Running(Protocol):
    """A command started by ``Sandbox.start``, running beside the commands after it."""

    def finish(self) -> ExecResult:
        """Close its standard input, wait for it to end (by its ``timeout_s`` at the
        latest) and say how it ended."""
        ...


class Sandbox(Protocol):
    """One fresh, isolated container; closed (and removed) by its context manager."""

    @property
    def image_digest(self) -> str:
        """The ID (sha256:...) of the image this sandbox runs."""
        ...

    def put_archive(self, dest: str, tar: bytes | Path) -> None:
        """Unpack an (already checked) uncompressed tar at ``dest`` inside the sandbox: the
        tar's bytes, or a file holding them."""
        ...

    def run(self, request: ExecRequest) -> ExecResult:
        """Run a command; it is killed at ``request.timeout_s``. ``SandboxLost`` when the
        sandbox's own state ended it after untrusted code started in it."""
        ...

    def start(self, request: ExecRequest) -> Running:
        """Start a command that runs beside the next ones (the verify phase's collector).
        Its standard input (``request.stdin``, a few bytes at most, then nothing) stays
        open until ``Running.finish``, which is how it learns the others are done."""
        ...

    def read_file(self, path: str, cap: int) -> tuple[bytes | None, bool]:
        """Read one regular file (None when absent), at most ``cap`` bytes, and a truncated flag."""
        ...

    @property
    def model_base_url(self) -> str | None:
        """Where the sandbox reaches the model (``model_access`` set), else None."""
        ...

    def model_calls(self) -> list[ModelCall]:
        """The requests the sandbox made to the model so far (empty without a gateway)."""
        ...

    @property
    def applied(self) -> Mapping[str, object]:
        """The limits the engine reports this sandbox has (``runner.sandbox.applied``)."""
        ...

    @property
    def prefilled(self) -> frozenset[str]:
        """The mount points that already hold the spec's ``staged_trees`` entry (a copy-free
        view of it); any other starts empty and the harness copies its content in."""
        ...


class SandboxFactory(Protocol):
    """Opens sandboxes; the Docker implementation is ``DockerSandboxFactory``."""

    def open(self, spec: SandboxSpec) -> SandboxSession:
        """A context manager that yields a started sandbox and removes it on exit."""
        ...


class SandboxSession(Protocol):
    def __enter__(self) -> Sandbox: ...

    def __exit__(self, *exc_info: object) -> None: ...
