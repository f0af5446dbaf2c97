"""The Docker adapter of the ``Sandbox`` interface, through the Engine API only.

Life of a sandbox: create volumes → create container → start → copy in → exec
(in-container ``timeout`` plus a host watchdog, ``exec_io``) → copy out (capped in
bytes and time, ``copy_out``) → kill → remove container and volumes, in
``finally``. Never ``containers.run``. A command the sandbox itself holds past
both limits (its ``timeout`` stopped by the agent's uid) kills the container: the
sandbox is dead from then on, and says so at once (``DockerSandbox.run``).

Hardening defaults (see README "Security"): the container's main process is
``sleep <lifetime>`` as root with every capability dropped, so it ends by
itself even if the host process dies, and the agent (uid 1000) cannot signal
it; agent commands run as uid 1000 through ``docker exec``. ``network_mode``
none, ``no-new-privileges``, read-only root, size-capped tmpfs for ``/tmp`` and
home; ``/workspace``, ``/io`` and the root-only ``/baseline`` are size-capped
tmpfs *volumes* because ``put_archive`` cannot write into a read-only root or a
plain tmpfs mount; where this process may mount and the engine sees its mounts,
``/workspace`` is instead a copy-on-write view of the fixture's staged tree whose writes
land on a tmpfs of the same cap (``runner.sandbox.overlay``). Memory without swap, CPU
quota, pids and nofile limits, ``init``, capped logs. Labels (run, job, worker,
deadline) let ``gc`` remove what a crashed worker left behind; labels are not visible
inside.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import docker
import docker.errors
from docker.types import HostConfig, LogConfig, Mount, Ulimit

from runner import telemetry
from runner.errors import SandboxError, UserError
from runner.sandbox import copy_out, end_mark
from runner.sandbox.applied import applied_of
from runner.sandbox.base import (
    AGENT_UID,
    ROOT_USER,
    WORKSPACE,
    ExecRequest,
    ExecResult,
    ModelAccess,
    ModelCall,
    Running,
    SandboxSpec,
)
from runner.sandbox.blame import Blame
from runner.sandbox.engine import API_ERRORS, exit_code, image_id, oom_kills
from runner.sandbox.exec_io import Verdict, stream_exec
from runner.sandbox.gateway_container import ModelGateway, open_gateway
from runner.sandbox.gateway_rates import LOCAL_LIMITERS, RouteLimiters
from runner.sandbox.gateway_relay import LOCAL_ACCOUNTS, Relay, RunAccounts, relay_for
from runner.sandbox.host_limits import HostCeiling
from runner.sandbox.image_config import volume_refusal, volumes
from runner.sandbox.image_env import ImagePaths, in_environment, root_env
from runner.sandbox.labels import LABEL_PREFIX, host_identity, process_identity
from runner.sandbox.mounts import SandboxMounts
from runner.sandbox.preflight import image_checks
from runner.sandbox.running import KILLED, DockerRunning, Ended
from runner.sandbox.view_probe import views_work

log = logging.getLogger(__name__)

KILL_GRACE_S = 2.0
WATCHDOG_GRACE_S = 10.0
REMOVE_ATTEMPTS = 5


class DockerSandboxFactory:
    """Opens hardened sandboxes on one Docker engine and tracks the live ones."""

    def __init__(self, client: docker.APIClient, *, worker: str | None = None) -> None:
        self.client = client
        self.worker = worker or socket.gethostname()
        self._live: set[str] = set()
        self._lock = threading.Lock()
        self._image_ids: dict[str, str] = {}
        self.paths = ImagePaths(client)  # image ID -> its environment's PATH
        self.ceiling = HostCeiling(client)  # no sandbox asks for more than the machine has
        self._views: dict[str | None, bool] = {}  # OCI runtime -> copy-free workspaces work
        self._probe_lock = threading.Lock()
        # Where a gateway's spend goes when its run has a dollar budget: this process's
        # accounts (a local run); a Celery worker sets the fleet's (runner.distributed).
        self.run_accounts: RunAccounts | None = LOCAL_ACCOUNTS
        self.limiters: RouteLimiters | None = LOCAL_LIMITERS  # the routes' shared rate limits

    def views_work(self, image: str, runtime: str | None, labels: dict[str, str]) -> bool:
        """Whether this factory's sandboxes under ``runtime`` can take copy-free workspaces
        (``runner.sandbox.view_probe``), probed once with a container of ``image``."""
        with self._probe_lock:
            if runtime not in self._views:
                why = views_work(self.client, image, runtime, labels)
                self._views[runtime] = why is None
                if why is None:
                    log.info("workspaces: copy-free views of staged trees (overlay)")
                else:
                    log.info("workspaces: copied into each sandbox (%s)", why)
            return self._views[runtime]

    def open(self, spec: SandboxSpec) -> DockerSession:
        return DockerSession(self, spec)

    def image_digest(self, image: str) -> str:
        if image not in self._image_ids:
            self._image_ids[image] = image_id(self.client, image)
        return self._image_ids[image]

    def pinned(self, image: str, pin: str | None) -> str:
        """The ID a sandbox of ``image`` is made from: ``pin`` (the run's) when given, which
        this engine must hold (one line naming both otherwise), else the tag's ID here. An
        image that declares a volume is refused (``runner.sandbox.image_config``)."""
        pin = pin or self.image_digest(image)
        try:
            info = self.client.inspect_image(pin)  # type: ignore[no-untyped-call]
        except docker.errors.NotFound:
            raise SandboxError(
                f"image {image}: the run pins {pin[:19]}, which this engine does not have "
                f"(the tag here is {self.image_digest(image)[:19]}); give this machine the "
                "pinned image (the run's --registry, or docker save/load), never a rebuild"
            ) from None
        except docker.errors.APIError as exc:
            raise SandboxError(f"image {image}: inspecting {pin[:19]} failed: {exc}") from exc
        refused = volume_refusal(image, volumes(info.get("Config")))
        if refused is not None:
            raise UserError(refused)
        return pin

    def preflight(self, spec: SandboxSpec, commands: Sequence[str] = ()) -> list[str]:
        """One sandbox with the run's limits, before any trial: the engine accepts the limits
        and the image has what the harness needs (``timeout``, ``git``, uid 1000) and no setuid
        or setgid file. One line (``UserError``) naming the image and the fix otherwise.
        Returns those of ``commands`` the agent's PATH does not find in the image. The
        sandbox is opened each time (the limits, runtime and network are this engine's to
        accept); what is asked of the image's files is kept per image ID."""
        try:
            with self.open(spec) as sandbox:
                return image_checks(sandbox, spec.image, spec.oci_runtime, commands)
        except SandboxError as exc:
            if spec.model_access is None:
                raise
            raise UserError(
                f"the model gateway of runtime.network 'model-only' did not start ({exc}); check "
                f"runtime.model_network ({spec.model_access.egress_network!r}) and run "
                "`make images` for deltarun/model-proxy"
            ) from exc

    def kill_all(self) -> None:
        """Kill every live sandbox of this factory (Ctrl-C); their sessions remove them."""
        with self._lock:
            live = list(self._live)
        for container in live:
            try:
                self.client.kill(container)
            except API_ERRORS:
                pass

    def _track(self, container: str, live: bool) -> None:
        with self._lock:
            (self._live.add if live else self._live.discard)(container)


class DockerSession:
    """Context manager: a started ``DockerSandbox`` that is removed on exit, always."""

    def __init__(self, factory: DockerSandboxFactory, spec: SandboxSpec) -> None:
        self.factory = factory
        self.spec = spec
        self.container: str | None = None
        self.gateway: ModelGateway | None = None
        self.relay: Relay | None = None  # the gateway's spend to the run's account
        self.mounts = SandboxMounts(factory.client, spec, factory.views_work)

    def __enter__(self) -> DockerSandbox:
        try:
            return self._create()
        except BaseException:
            self._remove()
            raise

    def __exit__(self, *exc_info: object) -> None:
        self._remove()

    def _labels(self) -> dict[str, str]:
        labels = {f"{LABEL_PREFIX}{k}": v for k, v in self.spec.labels.items()}
        labels[f"{LABEL_PREFIX}worker"] = self.factory.worker
        # The owning process: a reaper on the same host removes sandboxes whose owner died.
        labels[f"{LABEL_PREFIX}pid"] = process_identity(os.getpid())
        labels[f"{LABEL_PREFIX}host"] = host_identity()
        labels[f"{LABEL_PREFIX}deadline"] = str(int(time.time() + self.spec.lifetime_s + 60))
        return labels

    def _create(self) -> DockerSandbox:
        """Create and start the hardened container: volumes, then the model gateway (when the
        trial may call a model), then the container from the pinned image ID."""
        spec, client = self.spec, self.factory.client
        labels = self._labels()
        digest = self.factory.pinned(spec.image, spec.image_id)
        self.factory.ceiling.check(spec.limits)
        began = time.monotonic()
        try:
            mounts = self.mounts.create(labels, digest)
            network_mode, dns = "none", None
            if spec.model_access is not None:
                self.gateway = self._open_gateway(spec.model_access, labels)
                network_mode, dns = self.gateway.network, self.gateway.sandbox_dns
            created = client.create_container(
                digest,  # the image ID: the content the record names, never a moved tag
                command=["sleep", str(int(spec.lifetime_s) + 30)],
                entrypoint=[],  # nothing of the image's runs: no ENTRYPOINT wraps the sleep,
                healthcheck={"test": ["NONE"]},  # and no HEALTHCHECK runs beside it as root
                user=ROOT_USER,
                hostname="sandbox",
                working_dir=WORKSPACE,
                labels=labels,
                host_config=self._host_config(mounts, network_mode, dns),
                network_disabled=network_mode == "none",
                environment={},
            )
            self.container = str(created["Id"])
            self.factory._track(self.container, True)
            client.start(self.container)
            host_config = client.inspect_container(self.container).get("HostConfig") or {}
            telemetry.sandbox_started(time.monotonic() - began)
        except docker.errors.APIError as exc:
            if exc.status_code is not None and 400 <= exc.status_code < 500:
                raise UserError(
                    f"Docker refused the sandbox for image {spec.image!r}: "
                    f"{exc.explanation}; check runtime.limits in controls"
                ) from exc
            raise SandboxError(f"Docker failed to create the sandbox: {exc}") from exc
        except API_ERRORS as exc:
            raise SandboxError(f"Docker failed to create the sandbox: {exc}") from exc
        return DockerSandbox(
            self.factory,
            self.container,
            digest,
            self.gateway,
            applied_of(host_config, spec.limits.workspace_bytes),
            prefilled=frozenset(self.mounts.views),
        )

    def _host_config(self, mounts: list[Mount], network: str, dns: list[str] | None) -> HostConfig:
        """The container's hardening: every flag is in this one call, where a reader checks
        them together (see the module docstring)."""
        spec, limits = self.spec, self.spec.limits
        tmpfs = {
            "/tmp": f"rw,nosuid,nodev,size={limits.tmp_bytes},mode=1777",
            "/home/agent": f"rw,nosuid,nodev,size={limits.tmp_bytes},"
            f"uid={AGENT_UID},gid={AGENT_UID},mode=0700",
        }
        return self.factory.client.create_host_config(
            mounts=mounts,
            network_mode=network,
            dns=dns,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            read_only=True,
            tmpfs=tmpfs,
            mem_limit=limits.memory_bytes,
            memswap_limit=limits.memory_bytes,
            nano_cpus=limits.nano_cpus,
            pids_limit=limits.pids,
            ulimits=[Ulimit(name="nofile", soft=limits.nofile, hard=limits.nofile)],
            init=True,
            runtime=spec.oci_runtime,
            log_config=LogConfig(type="json-file", config={"max-size": "1m", "max-file": "1"}),
        )

    def _open_gateway(self, access: ModelAccess, labels: dict[str, str]) -> ModelGateway:
        """The gateway, and its relay to the run's account when the run has a dollar budget
        and to the route's limiter when it has shared rate limits (started before the
        sandbox: a run already spent is refused from the first request)."""
        factory = self.factory
        self.gateway = open_gateway(factory.client, access, labels, factory.worker)
        assert self.gateway.container is not None
        self.relay = relay_for(
            factory.client, self.gateway.container, access, factory.run_accounts, factory.limiters
        )
        if self.relay is not None:
            self.relay.start()
        return self.gateway

    def _remove(self) -> None:
        client = self.factory.client
        if self.container is not None:
            _remove_container(client, self.container)
            self.factory._track(self.container, False)
            self.container = None
        if self.gateway is not None:
            relay, self.relay = self.relay, None
            if relay is not None:
                relay.stop()  # no read of a proxy being removed
            self.gateway.__exit__(None, None, None)  # never raises; gc removes what it cannot
            if relay is not None:
                _settle(relay, self.gateway)
        self.mounts.remove()  # never raises; gc removes what it cannot


def _timeout(seconds: float) -> list[str]:
    """The in-container bound of a command: ``timeout``, then a kill after a grace."""
    return ["timeout", "-k", f"{KILL_GRACE_S:g}", f"{seconds:.3f}"]


def _settle(relay: Relay, gateway: ModelGateway) -> None:
    """Debit the trial's whole ledger to the run's account; a failure is logged (the
    record still carries the trial's tokens and cost)."""
    try:
        relay.close(gateway.exchanges())
    except Exception as exc:
        log.warning("run budget: the trial's last spend was not debited: %s", exc)


def _remove_container(client: docker.APIClient, container: str) -> None:
    """Force-remove ``container``, retrying while the engine is busy with it.

    A loaded engine can answer a forced removal with "removal already in progress"
    or "did not receive an exit event" while the kill is still under way; one
    attempt would then leave the container (and its volumes, which are in use)
    until ``deltarun gc``. The last failure is left to the labels and ``gc``.
    """
    for attempt in range(REMOVE_ATTEMPTS):
        try:
            client.remove_container(container, force=True, v=True)
            return
        except docker.errors.NotFound:
            return
        except API_ERRORS:
            if attempt + 1 < REMOVE_ATTEMPTS:
                time.sleep(0.5 * (attempt + 1))


class DockerSandbox:
    """A started container; every method is bounded in time and output."""

    def __init__(
        self,
        factory: DockerSandboxFactory,
        container: str,
        digest: str,
        gateway: ModelGateway | None = None,
        applied: Mapping[str, object] | None = None,
        *,
        prefilled: frozenset[str] = frozenset(),
    ) -> None:
        self.factory = factory
        self._path = factory.paths.of(digest)  # the image's environment, first on PATH
        self._names = factory.paths.names(digest)  # its variables, blanked for root commands
        self._prefilled = prefilled
        self._applied = dict(applied or {})  # what the engine reports (runner.sandbox.applied)
        self.client = factory.client
        self.container = container
        self._digest = digest
        self._gateway = gateway
        # Whether the sandbox's own state ended it, after untrusted code started in it; and
        # whether the watchdog killed it, after a command the sandbox held (``run``).
        self._blame = Blame(self.client, container)

    @property
    def _killed(self) -> bool:
        return self._blame.killed

    @property
    def model_base_url(self) -> str | None:
        return self._gateway.agent_base_url if self._gateway is not None else None

    def model_calls(self) -> list[ModelCall]:
        if self._gateway is None:
            return []
        return [e.call() for e in self._gateway.exchanges()]

    @property
    def image_digest(self) -> str:
        return self._digest

    @property
    def path(self) -> tuple[str, ...]:
        return self._path

    @property
    def applied(self) -> Mapping[str, object]:
        return self._applied

    @property
    def prefilled(self) -> frozenset[str]:
        return self._prefilled

    def put_archive(self, dest: str, tar: bytes | Path) -> None:
        self._blame.begin()
        if self._killed:
            raise SandboxError(f"cannot copy files into {dest}: the sandbox was killed")
        self._blame.judged(lambda: self._put_archive(dest, tar))

    def _put_archive(self, dest: str, tar: bytes | Path) -> None:
        try:
            # Read whole: the engine unpacks a body it has in full faster than a stream.
            data = tar.read_bytes() if isinstance(tar, Path) else tar
            ok = self.client.put_archive(self.container, dest, data)
        except API_ERRORS as exc:
            raise SandboxError(f"Docker failed to copy files into {dest}: {exc}") from exc
        if not ok:
            raise SandboxError(f"Docker refused to copy files into {dest}")

    def read_file(self, path: str, cap: int) -> tuple[bytes | None, bool]:
        """Bounded in bytes and time (``runner.sandbox.copy_out``). After the container
        was killed (``run``) nothing is left to read: every file is absent."""
        self._blame.begin()
        if self._killed:
            return None, False
        return self._blame.judged(
            lambda: copy_out.read_file(self.client, self.container, path, cap)
        )

    def run(self, request: ExecRequest) -> ExecResult:
        """The command under ``timeout`` in the container and a host watchdog.

        A command the sandbox held past both (its processes stopped, ``exec_io``) ends
        with its container, as a timeout; from then on the sandbox is dead and every
        later command ends at once the same way, without asking the engine. A failure
        the sandbox's own state explains, once untrusted code started in it, raises
        ``SandboxLost`` (``runner.sandbox.blame``), now and for every later command.
        """
        self._blame.begin(request)
        if self._killed:
            return KILLED
        return self._blame.judged(lambda: self._run(request))

    def _run(self, request: ExecRequest) -> ExecResult:
        request = in_environment(request, self._path, self._names)
        timeout = max(1.0, request.timeout_s)
        mark = end_mark.new_mark() if request.end_mark else None
        argv = [*_timeout(timeout), *end_mark.argv_of(request, mark)]
        started = time.monotonic()
        deadline = timeout + KILL_GRACE_S + WATCHDOG_GRACE_S
        read = end_mark.with_room(request, mark)
        streamed = stream_exec(self.client, self.container, read, argv, deadline)
        if streamed.verdict is Verdict.HELD:
            self._blame.killed = True
            got = end_mark.unmarked(
                request, None, streamed.output, streamed.truncated, streamed.stderr
            )
            return replace(
                KILLED, output=got.output, output_truncated=got.truncated, stderr=got.stderr
            )
        duration = time.monotonic() - started
        exit_code = self._exit_code(streamed.exec_id)
        timed_out = exit_code in (124, 137) and duration >= timeout - 0.05
        if not timed_out:
            self._blame.ended(exit_code)
        killed = exit_code == 137 and not timed_out
        lacking = end_mark.may_lack_mark(exit_code, timed_out)
        got = end_mark.unmarked(
            request, mark, streamed.output, streamed.truncated, streamed.stderr, killed=lacking
        )
        return ExecResult(
            exit_code=exit_code,
            output=got.output,
            output_truncated=got.truncated,
            timed_out=timed_out,
            oom_killed=killed and self.oom_kills() > 0,
            stderr=got.stderr,
            cut_short=got.cut_short,
        )

    def start(self, request: ExecRequest) -> Running:
        """A command beside the next ones (``runner.sandbox.running``), bounded like ``run``
        and judged like it (``SandboxLost``)."""
        self._blame.begin(request)
        if self._killed:
            return Ended(KILLED)
        request = in_environment(request, self._path, self._names)
        timeout = max(1.0, request.timeout_s)
        mark = end_mark.new_mark() if request.end_mark else None
        argv = [*_timeout(timeout), *end_mark.argv_of(request, mark)]
        deadline = timeout + KILL_GRACE_S + WATCHDOG_GRACE_S
        return self._blame.judged(
            lambda: DockerRunning(
                self.client, self.container, request, argv, deadline, self._blame, mark
            )
        )

    def _exit_code(self, exec_id: str) -> int | None:
        try:
            return exit_code(self.client, exec_id)
        except API_ERRORS as exc:
            raise SandboxError(f"Docker failed to report a command's exit: {exc}") from exc

    def oom_kills(self) -> int:
        """How many processes the kernel's OOM killer ended in this sandbox."""
        return oom_kills(self.client, self.container, root_env(self._names))
