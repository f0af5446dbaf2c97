"""The Docker side of ``deltarun build``: inspect, build, preflight, tag and remove images.

Implements ``runner.sandbox.images.ImageBuilder`` on the Engine API (the classic builder
of ``POST /build``, which needs no buildx plugin). The context is the tar the caller
made from exactly the files it digested, so what is built is what is pinned. Engine
failures become one-line ``UserError``s; a build that fails is an ``ImageBuildFailed``
carrying the last lines of its log.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

import docker
import docker.errors

from runner.bounded_input import without_escapes
from runner.errors import SandboxError, UserError
from runner.sandbox.base import ExecRequest, Limits, SandboxSpec
from runner.sandbox.build_deadline import DEFAULT_DEADLINE_S, BuildDeadline
from runner.sandbox.build_disk import DEFAULT_BUILD_DISK, BuildDisk
from runner.sandbox.build_log import BuildLog
from runner.sandbox.build_steps import DEFAULT_BUILD_PIDS, cap_pids
from runner.sandbox.docker import DockerSandboxFactory
from runner.sandbox.end_mark import run_whole
from runner.sandbox.engine import API_ERRORS
from runner.sandbox.host_limits import HostCeiling
from runner.sandbox.image_config import triggers, volumes
from runner.sandbox.images import BuildRequest, ImageBuildFailed, ImageInfo
from runner.sizes import format_size, parse_size

if TYPE_CHECKING:
    from runner.config.runtime import Runtime

TAIL_LINES = 6
PROBE_PATH = "/usr/local/bin:/usr/bin:/bin"
BUILD_TIMEOUT_S = 3600  # one read of the build stream: a long silent RUN step must not end it
LOST_PARENT_TRIES = 3
FALLBACK_STEP_MEMORY = 4 << 30  # a build step's memory when the engine does not say its size
# How the classic builder reports a step killed by SIGKILL (the memory limit's OOM kill).
_KILLED = re.compile(r"returned a non-zero code: 137\b")
# How a shell, make or Python says a fork failed (the step's process cap, most likely).
_NO_FORK = re.compile(r"(?i)\bcan(no|')?t fork\b|\bfork: |Resource temporarily unavailable")
# What the engine says when a build step's parent image was removed under it.
_LOST_PARENT = re.compile(r'unable to find image "?sha256:|unknown parent image ID')
# Build-log lines that say nothing about why a build failed: kept out of the tail.
_PLUMBING = ("--->", "Removing intermediate container")


class DockerImageBuilder:
    """``ImageBuilder`` on one Docker engine (a client with a long read timeout).

    Every build step (a ``RUN``) gets a memory limit, swap included: ``memory_bytes``, by
    default half the engine's machine. A build runs a suite's Dockerfile, which is hostile
    until proven otherwise, and the engine gives build steps no limit of its own: one step
    could take the machine's memory, and with swap off the kernel would kill what it picks
    on the host (the engine among them). Each step runs at most ``pids`` processes
    (``runner.sandbox.build_steps``). Each build ends within ``deadline_s`` from its
    start, its running step killed past it (``runner.sandbox.build_deadline``), and
    writes at most ``disk_bytes`` to the engine's disk (``runner.sandbox.build_disk``)."""

    def __init__(
        self,
        client: docker.APIClient,
        memory_bytes: int | None = None,
        deadline_s: float = DEFAULT_DEADLINE_S,
        pids: int = DEFAULT_BUILD_PIDS,
        disk_bytes: int = DEFAULT_BUILD_DISK,
    ) -> None:
        self.client = client
        self.memory_bytes = memory_bytes
        self.deadline_s = deadline_s
        self.pids = pids
        self.disk_bytes = disk_bytes
        self.ceiling = HostCeiling(client)

    def step_memory(self) -> int:
        """The memory of each build step: ``memory_bytes`` (at most the machine's; a
        ``UserError`` naming ``--memory`` above it), else half the engine's machine, else
        ``FALLBACK_STEP_MEMORY`` when the engine does not say its size."""
        total = self.ceiling.memory()
        if self.memory_bytes is None:
            return total // 2 if total else FALLBACK_STEP_MEMORY
        if total and self.memory_bytes > total:
            raise UserError(
                f"--memory {format_size(self.memory_bytes)} is more than this machine's memory "
                f"({format_size(total)}); a build step's swap is off, so it would be no limit: "
                f"give at most {format_size(total)}"
            )
        return self.memory_bytes

    def inspect(self, image: str) -> ImageInfo | None:
        try:
            data: dict[str, Any] = self.client.inspect_image(image)  # type: ignore[no-untyped-call]
        except docker.errors.ImageNotFound:
            return None
        except API_ERRORS as exc:
            raise UserError(f"Docker failed to inspect image {image!r}: {exc}") from exc
        layers = tuple((data.get("RootFS") or {}).get("Layers") or ())
        config = data.get("Config") or {}
        labels = dict(config.get("Labels") or {})
        return ImageInfo(str(data["Id"]), layers, labels, triggers(config), volumes(config))

    def build(self, context: IO[bytes], request: BuildRequest, log: Callable[[str], None]) -> str:
        """The image ID; built again (at most ``LOST_PARENT_TRIES`` times, the engine's cache
        keeping the steps already done) when the engine lost a step's intermediate image to
        a removal elsewhere on the engine: the classic builder does not protect them
        (moby/moby#29011), and a CI job cleaning images beside a build is common."""
        start = context.tell()
        for _ in range(LOST_PARENT_TRIES - 1):
            try:
                return self._build_once(context, request, log)
            except ImageBuildFailed as exc:
                if not _LOST_PARENT.search(str(exc)):
                    raise
                log(f"the engine lost an intermediate image ({exc.tail[-1]}); building again")
                context.seek(start)
        return self._build_once(context, request, log)

    def _build_once(
        self, context: IO[bytes], request: BuildRequest, log: Callable[[str], None]
    ) -> str:
        memory = self.step_memory()
        steps = BuildLog(self.client)
        with (
            BuildDeadline(self.client, self.deadline_s) as deadline,
            BuildDisk(self.client, self.disk_bytes, steps) as disk,
        ):
            try:
                return self._follow_build(context, request, log, memory, (steps, deadline, disk))
            except ImageBuildFailed as exc:
                if disk.over:
                    cap = format_size(self.disk_bytes)
                    why = f"the build wrote more than {cap} to the engine's disk"
                    more = "; if it needs more, give deltarun build --disk SIZE"
                    raise ImageBuildFailed([*exc.tail, why + more], at_limit=True) from exc
                if deadline.expired:
                    why = f"the build did not end within {self.deadline_s:g} s"
                    more = "; if it needs longer, give deltarun build --timeout SECONDS"
                    raise ImageBuildFailed([*exc.tail, why + more], at_limit=True) from exc
                if _KILLED.search(str(exc)):  # the step's end, with what may have ended it
                    limit = f"(a build step's memory limit is {format_size(memory)}; if it needs "
                    more = "more, give deltarun build --memory SIZE)"
                    raise ImageBuildFailed([*exc.tail, limit + more], at_limit=True) from exc
                if _NO_FORK.search(str(exc)):
                    limit = f"(a build step may run {self.pids} processes at once; if it needs "
                    more = "more, give deltarun build --pids N)"
                    raise ImageBuildFailed([*exc.tail, limit + more], at_limit=True) from exc
                raise

    def _follow_build(
        self,
        context: IO[bytes],
        request: BuildRequest,
        log: Callable[[str], None],
        memory: int,
        watches: tuple[BuildLog, BuildDeadline, BuildDisk],
    ) -> str:
        steps, deadline, disk = watches
        tail: deque[str] = deque(maxlen=TAIL_LINES)
        image: str | None = None
        try:
            stream = self.client.build(
                fileobj=context,
                custom_context=True,
                buildargs=dict(request.buildargs),
                labels=dict(request.labels),
                network_mode="none" if request.network == "none" else None,
                nocache=request.nocache,
                pull=False,
                rm=True,
                forcerm=True,
                decode=True,
                container_limits={"memory": memory, "memswap": memory},
            )
            for event in stream:
                step = steps.read(event)
                if step is not None:
                    cap_pids(self.client, step, self.pids)
                    deadline.running(step)
                    disk.running(step)
                image = _follow(event, tail, log) or image
        except API_ERRORS as exc:
            raise ImageBuildFailed([*tail, f"Docker: {exc}"]) from exc
        if image is None:
            raise ImageBuildFailed([*tail, "the engine reported no image ID"])
        if disk.over:  # its last step went past the cap and ended before a look killed it
            self.remove(image)
            raise ImageBuildFailed([*tail, f"image {image[:19]} removed"])
        return image

    def preflight(self, image: str, runtime: Runtime) -> None:
        limits = runtime.limits
        spec = SandboxSpec(
            image=image,
            limits=Limits(
                memory_bytes=parse_size(limits.memory),
                nano_cpus=int(limits.cpus * 1e9),
                pids=limits.pids,
                workspace_bytes=parse_size(limits.workspace),
            ),
            lifetime_s=60,
            labels={"run": "build", "job": "preflight"},
            oci_runtime=runtime.oci_runtime,
        )
        try:
            DockerSandboxFactory(self.client).preflight(spec)
        except SandboxError as exc:
            raise UserError(f"the sandbox preflight could not run ({exc})") from exc

    def probe(self, image: str, script: str) -> str:
        """What ``sh -c script`` prints as the agent's uid in a throwaway sandbox of
        ``image`` (no network, small limits): asking an image what it has. The script
        exits 0; any other end (a signal, a timeout) leaves no answer, only a part."""
        spec = SandboxSpec(
            image=image,
            limits=Limits(
                memory_bytes=256 << 20, nano_cpus=1_000_000_000, pids=64, workspace_bytes=1 << 20
            ),
            lifetime_s=60,
            labels={"run": "build", "job": "probe"},
        )
        try:
            with DockerSandboxFactory(self.client).open(spec) as sandbox:
                result = run_whole(
                    sandbox,
                    ExecRequest(argv=["sh", "-c", script], env={"PATH": PROBE_PATH}, timeout_s=30),
                    f"a probe of image {image[:19]}",
                )
                if result.exit_code != 0 or result.timed_out:
                    raise SandboxError(f"it ended {result.exit_code}")
        except SandboxError as exc:
            raise UserError(f"image {image[:19]}: the probe could not run ({exc})") from exc
        return result.output.decode("utf-8", "replace")

    def tag(self, image: str, tag: str) -> None:
        repository, _, name = tag.rpartition(":")
        try:
            self.client.tag(image, repository, name, force=True)
        except API_ERRORS as exc:
            raise UserError(f"Docker failed to tag {image[:19]} as {tag}: {exc}") from exc

    def remove(self, image: str) -> None:
        try:
            self.client.remove_image(image)
        except API_ERRORS:
            pass  # another tag or container still uses it: it stays, untagged by us


def _follow(event: Any, tail: deque[str], log: Callable[[str], None]) -> str | None:
    """Handle one event of the build stream: log its text, keep the tail, return the image
    ID when it carries one; an error event raises ``ImageBuildFailed`` with the tail."""
    if not isinstance(event, dict):
        return None
    text = event.get("stream")
    if isinstance(text, str):
        # The build's own output (a RUN step's colours, a title) reaches the terminal
        # with -v and the error line with the tail: never as escape sequences.
        for line in without_escapes(text).splitlines():
            if line.strip():
                log(line.rstrip())
                if not line.lstrip().startswith(_PLUMBING):
                    tail.append(line.strip())
    if "error" in event or "errorDetail" in event:
        detail = event.get("errorDetail") or {}
        message = str(detail.get("message") or event.get("error") or "build failed")
        message = without_escapes(message).strip()
        raise ImageBuildFailed([*tail, message.replace("\n", " ")])
    aux = event.get("aux")
    if isinstance(aux, dict) and isinstance(aux.get("ID"), str):
        return str(aux["ID"])
    return None
