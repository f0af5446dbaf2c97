"""Who is to blame when a command in a sandbox fails or stalls: the sandbox, or the engine.

A command can fail for want of the engine (it refuses a call, stalls, loses a
command) or because of what runs in the sandbox: a fork bomb fills its pids
limit, a memory bomb or a filled tmpfs (``/tmp``, home and ``/dev/shm`` live in
the sandbox's memory) fills its memory limit, and the runtime ends the whole
sandbox. Under runc the host's kernel holds such a sandbox and its commands end
as usual. Under gVisor (runsc) the sandbox's kernel, the sentry, is a process
inside the sandbox's own limits and dies with them: the engine then loses the
sandbox's commands (their output never ends, or "container is not running").
What the agent did must not become an infrastructure ``error``, and an engine
that failed must not become the agent's miss.

``fault`` is the one rule, with its evidence in order. It is asked only after a
command failed or stalled, and only about a sandbox where code deltarun does
not control has started (``ExecRequest.untrusted``: the agent's program, a tool
call's command, the code under test); before that only deltarun ran there and
every failure is infrastructure. The evidence is the engine's own account of the
container afterwards (``gather``), never the failed call's wording:

1. The engine does not answer, or the container is paused (an operator) or
   marked dead (a removal that failed): infrastructure.
2. The container was OOM-killed: the sandbox's processes and files used its
   whole memory limit. The agent's.
3. The container ended with a status of its own, 1 to 127, and no engine
   error: its main process is root's ``sleep`` for the sandbox's lifetime,
   which nothing in the sandbox can signal, so its runtime ended it while the
   sandbox's processes ran. Under runsc that is the sentry exiting (Go's status
   2) when it can create no more host threads: on gVisor's ptrace platform each
   process of the sandbox takes about a dozen of the sandbox's pids for the
   sentry's threads (measured here; gVisor issue 2490). The agent's.
4. It ended with status 0 (its lifetime ran out: deltarun's margin), by a
   signal (128 and above: the engine or an operator killed it), or with an
   engine error: infrastructure.
5. It still runs with its pids at the limit, or its memory (less the page cache
   the kernel can reclaim) at the limit: nothing more could start in it. The
   agent's.
6. It still runs with room: the engine failed on its own. Infrastructure.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import docker

from runner.errors import SandboxError
from runner.sandbox.base import ExecRequest, SandboxLost
from runner.sandbox.exec_io import GONE, answered

T = TypeVar("T")

# A command needs ``timeout`` and its child: pids this close to the limit are full.
PIDS_ROOM = 2
# Memory the sandbox cannot give back (usage less reclaimable cache) this close to its
# limit is full: the next allocation of a command waits on the OOM killer.
MEMORY_FULL = 0.95
# How long the engine has to give its account of the container.
GATHER_S = 5.0
# How long after a command was killed its container may still be reported running: the
# engine reports the command's end before its container's.
SETTLE_S = 2.0


@dataclass(frozen=True)
class Evidence:
    """The engine's account of a sandbox's container after one of its commands failed."""

    running: bool
    paused: bool = False
    dead: bool = False
    oom_killed: bool = False
    exit_code: int | None = None
    engine_error: str = ""  # State.Error: the engine's own failure to run the container
    runtime: str | None = None
    pids: int | None = None  # current, and the limit: only while it runs
    pids_limit: int | None = None
    memory: int | None = None  # usage less reclaimable cache, and the limit
    memory_limit: int | None = None


@dataclass(frozen=True)
class Fault:
    """The sandbox's own state ended it: the trial is the agent's, with ``reason`` (what
    ended the sandbox, worded to follow "the sandbox ended: ")."""

    reason: str
    oom_killed: bool = False
    exit_code: int | None = None  # of the command it ended: 137 when the sandbox was OOM-killed


def fault(evidence: Evidence | None) -> Fault | None:
    """The sandbox's own doing, with its reason; None when the engine is to blame (the
    module's docstring gives each step and why)."""
    if evidence is None or evidence.paused or evidence.dead:
        return None
    if not evidence.running:
        return _ended(evidence)
    pids, pids_limit = evidence.pids, evidence.pids_limit
    if pids is not None and pids_limit and pids >= pids_limit - PIDS_ROOM:
        return Fault(f"its processes filled its pids limit ({pids} of {pids_limit})")
    memory, memory_limit = evidence.memory, evidence.memory_limit
    if memory is not None and memory_limit and memory >= MEMORY_FULL * memory_limit:
        return Fault(
            f"its processes and files filled its memory limit ({_mib(memory)} of "
            f"{_mib(memory_limit)})"
        )
    return None


def _ended(evidence: Evidence) -> Fault | None:
    if evidence.oom_killed:
        limit = f" ({_mib(evidence.memory_limit)})" if evidence.memory_limit else ""
        return Fault(
            f"its processes and files filled its memory limit{limit} and the kernel's OOM "
            "killer ended it",
            oom_killed=True,
            exit_code=137,
        )
    code = evidence.exit_code
    if code is None or not 0 < code < 128 or evidence.engine_error:
        return None
    if evidence.runtime == "runsc":
        limit = f" ({evidence.pids_limit})" if evidence.pids_limit else ""
        return Fault(
            f"its kernel (gVisor's sentry) exited with status {code} while its processes ran, "
            "ended by neither deltarun nor the engine: under runsc each process of a sandbox "
            f"takes host threads from its pids limit{limit}, and the sentry dies when none "
            "is left"
        )
    return Fault(
        f"its runtime ({evidence.runtime or 'the default'}) exited with status {code} while "
        "its processes ran, ended by neither deltarun nor the engine"
    )


def _mib(size: int) -> str:
    return f"{size / 2**20:.0f} MiB"


def gather(client: docker.APIClient, container: str) -> Evidence | None:
    """The engine's account of ``container`` within ``GATHER_S``: its state and limits,
    and while it runs its pids and memory; None when the engine does not answer."""
    info = answered(lambda: client.inspect_container(container), GATHER_S)
    if not isinstance(info, Mapping):
        return None
    state: Mapping[str, Any] = info.get("State") or {}
    host: Mapping[str, Any] = info.get("HostConfig") or {}
    evidence = Evidence(
        running=bool(state.get("Running")),
        paused=bool(state.get("Paused")),
        dead=bool(state.get("Dead")),
        oom_killed=bool(state.get("OOMKilled")),
        exit_code=_int(state.get("ExitCode")),
        engine_error=str(state.get("Error") or ""),
        runtime=host.get("Runtime"),
        pids_limit=_int(host.get("PidsLimit")) or None,
        memory_limit=_int(host.get("Memory")) or None,
    )
    if not evidence.running or evidence.paused:
        return evidence
    stats = answered(lambda: client.stats(container, stream=False, one_shot=True), GATHER_S)
    if not isinstance(stats, Mapping):
        return evidence  # the rule then finds no full limit: infrastructure
    return _with_usage(evidence, stats)


def _with_usage(evidence: Evidence, stats: Mapping[str, Any]) -> Evidence:
    pids: Mapping[str, Any] = stats.get("pids_stats") or {}
    memory: Mapping[str, Any] = stats.get("memory_stats") or {}
    detail: Mapping[str, Any] = memory.get("stats") or {}
    usage = _int(memory.get("usage"))
    # cgroup v1 names the reclaimable part total_inactive_file, v2 inactive_file.
    cache = _int(detail.get("total_inactive_file", detail.get("inactive_file"))) or 0
    return replace(
        evidence,
        pids=_int(pids.get("current")),
        pids_limit=evidence.pids_limit or _int(pids.get("limit")),
        memory=None if usage is None else max(0, usage - cache),
        memory_limit=evidence.memory_limit or _int(memory.get("limit")),
    )


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class Blame:
    """One sandbox's side of the rule: whether untrusted code has started in it, and the
    fault that ended it. Every command and copy of the sandbox passes through ``judged``;
    once a fault is found, every later one raises ``SandboxLost`` at once, without asking
    the engine about a container that is gone."""

    def __init__(self, client: docker.APIClient, container: str) -> None:
        self._client = client
        self._container = container
        self._untrusted = False
        self._fault: Fault | None = None
        # deltarun killed the container (a command the sandbox held past its limit): every
        # command of it, and those still running beside, ends as that timeout, unjudged.
        self.killed = False

    def begin(self, request: ExecRequest | None = None) -> None:
        """Before a command (``request``) or a copy: ``SandboxLost`` when the sandbox is
        already lost; a command of untrusted code counts from its start."""
        if self._fault is not None:
            raise self._lost(self._fault)
        if request is not None and request.untrusted:
            self._untrusted = True

    def ended(self, exit_code: int | None) -> None:
        """After a command ended other than 0 within its limit: ``SandboxError`` when its
        container no longer runs. The engine ends the command of a container that stopped
        under it with a status of its own (137 for a kill, a runtime's refusal to run in a
        stopped container); that status is not the command's, and ``judged`` says whose it
        is. A status of a signal (or none) is looked at again for ``SETTLE_S``."""
        if exit_code == 0:
            return
        until = time.monotonic() + (SETTLE_S if exit_code is None or exit_code >= 128 else 0)
        while True:
            info = answered(lambda: self._client.inspect_container(self._container), GATHER_S)
            state = info.get("State") if isinstance(info, Mapping) else None
            if isinstance(state, Mapping) and not state.get("Running"):
                raise SandboxError(GONE)
            if time.monotonic() >= until:
                return
            time.sleep(0.2)

    def judged(self, call: Callable[[], T]) -> T:
        """``call()``; a ``SandboxError`` it raises becomes ``SandboxLost`` when the rule
        (``fault``, on the engine's account now) finds the sandbox's own doing."""
        try:
            return call()
        except SandboxError as exc:
            lost = self.lost()
            if lost is None:
                raise
            raise lost from exc

    def lost(self) -> SandboxLost | None:
        """After a failure: ``SandboxLost`` when the sandbox's own state explains it."""
        if self._fault is None and self._untrusted:
            self._fault = fault(gather(self._client, self._container))
        return None if self._fault is None else self._lost(self._fault)

    @staticmethod
    def _lost(found: Fault) -> SandboxLost:
        return SandboxLost(found.reason, oom_killed=found.oom_killed, exit_code=found.exit_code)
