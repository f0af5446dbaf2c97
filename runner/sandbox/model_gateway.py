"""The model gateway of ``network: model-only``: one model endpoint for a sandbox, nothing else.

Why: an agent that calls a model needs the network, but a sandbox with the network
could reach anything (the host, the LAN, a metadata service, the internet) and would
need the API key. So the sandbox joins a fresh *internal* Docker network (no route
out) whose only other member is a small forwarding proxy (``worker_images/proxy``),
reachable as ``http://model-gateway:8080``. The proxy is also on an egress network
and forwards only paths under the upstream's prefix, only to the upstream's host.
The API key is in the proxy's environment alone, never in the sandbox: the proxy
drops the agent's ``Authorization`` and adds its own.

Life of a gateway (a context manager, one per trial):
create the internal network → create the proxy on the egress network → connect it to
the internal network as ``model-gateway`` → start → wait until it answers → (the
sandbox runs with ``network_mode=gateway.network``) → remove proxy and network, always.

The internal network is a bridge with ``inhibit_ipv4``: the host takes no address on
it, so the sandbox cannot reach services listening on the host through the bridge's
gateway address either (a plain internal network leaves that open). The proxy is
hardened like a sandbox (no capabilities, read-only root, small memory and pids
limits, IP forwarding off) and carries the same labels, so ``deltarun gc`` and the
worker's reaper remove what a crashed process left, networks included.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard
from urllib.parse import urlsplit

import docker
import docker.errors
from docker.types import LogConfig

from runner.errors import SandboxError, UserError
from runner.sandbox.engine import API_ERRORS

GATEWAY_ALIAS = "model-gateway"
GATEWAY_PORT = 8080
PROXY_IMAGE = "deltarun/model-proxy:bookworm"
NETWORK_PREFIX = "deltarun-mo-"
PROXY_USER = "1000:1000"
READY_PATH = "/__deltarun_ready"
READY_TIMEOUT_S = 10.0
_READY_PROBE = (
    "import urllib.request; "
    f"urllib.request.urlopen('http://127.0.0.1:{GATEWAY_PORT}{READY_PATH}', timeout=2)"
)


@dataclass(frozen=True)
class GatewaySpec:
    """What one gateway forwards to, and how it is labelled."""

    upstream: str
    """The route's ``base_url``, e.g. ``https://api.example.com/v1``."""
    api_key: str | None = field(repr=False)
    """Sent upstream by the proxy; goes only into the proxy container's environment."""
    labels: Mapping[str, str]
    """Full Docker labels (already prefixed ``deltarun.``), put on the network and the proxy."""
    egress_network: str = "bridge"
    """The network through which the proxy reaches the upstream."""
    image: str = PROXY_IMAGE


@dataclass(frozen=True)
class Exchange:
    """One request the proxy answered (one JSON line of its log)."""

    path: str
    status: int
    model: str | None
    prompt_tokens: int
    completion_tokens: int

    @classmethod
    def parse(cls, line: str) -> Exchange | None:
        """The exchange on a log line, or ``None`` for anything else."""
        try:
            data = json.loads(line)
        except ValueError:
            return None
        if not isinstance(data, dict):
            return None
        path, status, model = data.get("path"), data.get("status"), data.get("model")
        prompt, completion = data.get("prompt_tokens"), data.get("completion_tokens")
        if (
            isinstance(path, str)
            and (model is None or isinstance(model, str))
            and _is_int(status)
            and _is_int(prompt)
            and _is_int(completion)
        ):
            return cls(path, status, model, prompt, completion)
        return None


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


class ModelGateway:
    """Context manager: an internal network plus the proxy that is its only way out."""

    def __init__(self, client: docker.APIClient, spec: GatewaySpec) -> None:
        parts = urlsplit(spec.upstream)
        plain = not (parts.username or parts.password or parts.query or parts.fragment)
        if parts.scheme not in ("http", "https") or not parts.hostname or not plain:
            # The URL is not echoed: it might carry a credential.
            raise UserError(
                "the model route's base_url must be an http(s) URL with a host and no "
                "credentials, query or fragment (the key goes in the route's api key)"
            )
        self.client = client
        self.spec = spec
        self.network = f"{NETWORK_PREFIX}{uuid.uuid4().hex[:16]}"
        """Name of the internal network: the sandbox's ``network_mode``."""
        self.agent_base_url = f"http://{GATEWAY_ALIAS}:{GATEWAY_PORT}{parts.path.rstrip('/')}"
        """The ``base_url`` the agent uses inside the sandbox."""
        self.container: str | None = None
        self.proxy_address: str | None = None
        self._logs: bytes = b""

    @property
    def sandbox_dns(self) -> list[str]:
        """Pass as the sandbox's ``dns``: the engine's resolver then sends names it does
        not know to the proxy (which serves no DNS) instead of the host's resolvers.
        Engines before 23.0.11 / 25.0.4 / 26.0.0 forward them from the host's namespace
        when the host resolver is on loopback, a way out of an internal network
        (CVE-2024-29018). Valid once entered."""
        if self.proxy_address is None:
            raise SandboxError("the model gateway is not running")
        return [self.proxy_address]

    def __enter__(self) -> ModelGateway:
        try:
            self._create_network()
            self._create_proxy()
            self._wait_ready()
        except BaseException:
            self._remove()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._logs = self._read_logs(strict=False)
        self._remove()

    def exchanges(self) -> list[Exchange]:
        """The proxy's log, one ``Exchange`` per answered request; kept after exit."""
        raw = self._read_logs(strict=True) if self.container is not None else self._logs
        found = (Exchange.parse(line) for line in raw.decode("utf-8", "replace").splitlines())
        return [exchange for exchange in found if exchange is not None]

    def _create_network(self) -> None:
        try:
            self.client.create_network(
                self.network,
                driver="bridge",
                internal=True,
                check_duplicate=True,
                labels=dict(self.spec.labels),
                # No host address on the bridge: the host is not reachable from it.
                options={"com.docker.network.bridge.inhibit_ipv4": "true"},
            )
        except API_ERRORS as exc:
            raise SandboxError(f"Docker failed to create the model-only network: {exc}") from exc

    def _create_proxy(self) -> None:
        spec, client = self.spec, self.client
        environment = {"DELTARUN_UPSTREAM": spec.upstream}
        if spec.api_key:
            environment["DELTARUN_UPSTREAM_KEY"] = spec.api_key
        try:
            host_config = client.create_host_config(
                network_mode=spec.egress_network,
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                read_only=True,
                tmpfs={"/tmp": "rw,nosuid,nodev,noexec,size=16m,mode=1777"},
                mem_limit=128 << 20,
                memswap_limit=128 << 20,
                pids_limit=64,
                nano_cpus=500_000_000,
                init=True,
                # Never a router between the sandbox's network and the egress one.
                sysctls={"net.ipv4.ip_forward": "0"},
                log_config=LogConfig(type="json-file", config={"max-size": "1m", "max-file": "1"}),
            )
            created = client.create_container(
                spec.image,
                name=f"{self.network}-proxy",
                hostname=GATEWAY_ALIAS,
                user=PROXY_USER,
                labels=dict(spec.labels),
                environment=environment,
                host_config=host_config,
            )
            self.container = str(created["Id"])
            # Connected before start: the proxy comes up on both networks at once.
            client.connect_container_to_network(
                self.container, self.network, aliases=[GATEWAY_ALIAS]
            )
            client.start(self.container)
        except docker.errors.ImageNotFound as exc:
            raise SandboxError(
                f"model proxy image {spec.image!r} is not present; build it with `make images`"
            ) from exc
        except docker.errors.APIError as exc:
            # A missing egress network shows here, at start: "network <name> not found".
            raise SandboxError(
                f"Docker failed to start the model proxy: {exc.explanation}"
            ) from exc
        except API_ERRORS as exc:
            raise SandboxError(f"Docker failed to start the model proxy: {exc}") from exc

    def _wait_ready(self) -> None:
        """Poll the readiness path from inside the proxy container, up to ``READY_TIMEOUT_S``."""
        assert self.container is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self._probe():
            state = self._inspect()["State"]
            if not state.get("Running"):
                tail = self._read_logs(strict=False, stderr=True)[-400:]
                raise SandboxError(
                    f"model proxy exited with code {state.get('ExitCode')}: "
                    f"{tail.decode('utf-8', 'replace').strip() or 'no output'}"
                )
            if time.monotonic() > deadline:
                raise SandboxError(f"model proxy not ready after {READY_TIMEOUT_S:g}s")
            time.sleep(0.1)
        networks = self._inspect()["NetworkSettings"]["Networks"] or {}
        address = (networks.get(self.network) or {}).get("IPAddress")
        if not address:
            raise SandboxError(f"the model proxy has no address on network {self.network}")
        self.proxy_address = str(address)

    def _probe(self) -> bool:
        assert self.container is not None
        try:
            exec_id = self.client.exec_create(
                self.container, ["python3", "-c", _READY_PROBE], stdout=True, stderr=True
            )["Id"]
            self.client.exec_start(exec_id)
            return self.client.exec_inspect(exec_id).get("ExitCode") == 0
        except docker.errors.APIError:
            return False  # not running (yet, or any more): the caller looks at the state
        except API_ERRORS as exc:
            raise SandboxError(f"Docker failed while the model proxy started: {exc}") from exc

    def _inspect(self) -> Any:
        assert self.container is not None
        try:
            return self.client.inspect_container(self.container)
        except API_ERRORS as exc:
            raise SandboxError(f"Docker failed to inspect the model proxy: {exc}") from exc

    def _read_logs(self, *, strict: bool, stderr: bool = False) -> bytes:
        if self.container is None:
            return self._logs
        try:
            out = self.client.logs(self.container, stdout=not stderr, stderr=stderr)
        except API_ERRORS as exc:
            if strict:
                raise SandboxError(f"Docker failed to read the model proxy's log: {exc}") from exc
            return b""
        return out if isinstance(out, bytes) else b""

    def _remove(self) -> None:
        client = self.client
        if self.container is not None:
            try:
                client.remove_container(self.container, force=True, v=True)
            except API_ERRORS:
                pass  # gone already, or the labels let `deltarun gc` remove it later
            self.container = None
        for _ in range(3):
            try:
                client.remove_network(self.network)
                return
            except docker.errors.NotFound:
                return
            except API_ERRORS:
                time.sleep(0.2)  # an endpoint still being torn down; else gc removes it
