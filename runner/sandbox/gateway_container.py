"""The model gateway of ``network: model-only``: one model endpoint for a sandbox, nothing else.

Why: an agent that calls a model needs the network, but a sandbox with the network
could reach anything (the host, the LAN, a metadata service, the internet) and would
need the API key. So the sandbox joins a fresh *internal* Docker network (no route
out) whose only other member is a small forwarding proxy (``runner.gateway``),
reachable as ``http://model-gateway:8080``. The proxy is also on an egress network
and forwards only paths under the upstream's prefix, only to the upstream's host.
The API key is in the proxy's environment alone, never in the sandbox: the proxy
drops the agent's key headers (``Authorization``, ``x-api-key``, ``api-key``) and adds
the real key in the style of the request's API. With a budget (``GatewaySpec``), the
proxy stops forwarding once the trial's tokens or dollars are spent.

The proxy keeps its ledger (runner.gateway.ledger) in a volume of its own, written
before each answer goes back: one line per request (``Exchange``: every model name the
answer gives, its token counts for Anthropic Messages, OpenAI Chat Completions and
Responses, streamed or not, with ``prompt_tokens`` counting cached input tokens too, the
upstream's latency, the tool calls the model asked for, what it could not read whole) and
totals nothing the agent sends can fill or rotate (runner.sandbox.gateway_ledger).

Life of a gateway (a context manager, one per trial):
create the internal network → create the ledger volume and the proxy on the egress
network → connect it to the internal network as ``model-gateway`` → start → wait until
it answers → (the sandbox runs with ``network_mode=gateway.network``) → read the ledger
→ remove proxy, volume and network, always.

The internal network is a bridge with ``inhibit_ipv4``: the host takes no address on
it, so the sandbox cannot reach services listening on the host through the bridge's
gateway address either (a plain internal network leaves that open). The proxy is
hardened like a sandbox (no capabilities, read-only root, small memory and pids
limits, IP forwarding off) and carries the same labels, so ``deltarun gc`` and the
worker's reaper remove what a crashed process left, networks included.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import docker
import docker.errors
from docker.types import LogConfig, Mount

from runner.config.model_keys import model_key, where_keys_are
from runner.errors import SandboxError, UserError
from runner.sandbox.base import ModelAccess
from runner.sandbox.engine import API_ERRORS, exit_code
from runner.sandbox.gateway_ledger import LEDGER_DIR, Exchange, read_ledger

__all__ = ["Exchange", "GatewaySpec", "ModelGateway", "open_gateway"]

GATEWAY_ALIAS = "model-gateway"
GATEWAY_PORT = 8080
PROXY_IMAGE = "deltarun/model-proxy:bookworm"
NETWORK_PREFIX = "deltarun-mo-"
PROXY_USER = "1000:1000"
READY_PATH = "/__deltarun_ready"
READY_TIMEOUT_S = 10.0
PROXY_MEMORY = 256 << 20
PRICE_KEYS = frozenset({"input", "output", "cache_read", "cache_write"})
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
    budget_tokens: int | None = None
    """Input plus output tokens of the trial (cached input included); past it the proxy
    forwards nothing more."""
    budget_usd: float | None = None
    """Dollars of the trial, priced with ``price``; past it the proxy forwards nothing more."""
    price: Mapping[str, float] | None = None
    """Dollars per million tokens: ``input`` and ``output``, optionally ``cache_read`` and
    ``cache_write`` (0 when absent). Required with ``budget_usd``."""
    max_output_tokens: int | None = None
    """A request's output maximum when it names none: what an answer the proxy cannot read
    whole counts at (runner.gateway.ledger)."""

    def budget_environment(self) -> dict[str, str]:
        """The proxy's budget variables; ``UserError`` for a budget it could not enforce."""
        environment: dict[str, str] = {}
        if self.max_output_tokens is not None:
            if not isinstance(self.max_output_tokens, int) or self.max_output_tokens < 1:
                raise UserError("the route's max_output_tokens must be a whole number, 1 or more")
            environment["DELTARUN_MAX_OUTPUT_TOKENS"] = str(self.max_output_tokens)
        if self.budget_tokens is not None:
            if not _whole(self.budget_tokens) or self.budget_tokens < 0:
                raise UserError("the trial's token budget must be a whole number, 0 or more")
            environment["DELTARUN_BUDGET_TOKENS"] = str(self.budget_tokens)
        if self.budget_usd is not None:
            if self.price is None:
                raise UserError("a dollar budget needs the model's price")
            environment["DELTARUN_BUDGET_USD"] = repr(_dollars("budget", self.budget_usd))
        if self.price is not None:
            keys = set(self.price)
            if not {"input", "output"} <= keys <= PRICE_KEYS:
                raise UserError(
                    "a price names input and output, and optionally cache_read and cache_write"
                )
            prices = {key: _dollars(f"price {key}", value) for key, value in self.price.items()}
            environment["DELTARUN_PRICE"] = json.dumps(prices, sort_keys=True)
        return environment


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _dollars(what: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UserError(f"the {what} must be a number")
    if not math.isfinite(value) or value < 0:
        raise UserError(f"the {what} must be a finite number, 0 or more")
    return float(value)


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
        self._budget_environment = spec.budget_environment()  # checked before anything starts
        self.network = f"{NETWORK_PREFIX}{uuid.uuid4().hex[:16]}"
        """Name of the internal network: the sandbox's ``network_mode``."""
        self.agent_base_url = f"http://{GATEWAY_ALIAS}:{GATEWAY_PORT}{parts.path.rstrip('/')}"
        """The ``base_url`` the agent uses inside the sandbox."""
        self.volume = f"{self.network}-ledger"
        """The proxy's ledger (runner.gateway.ledger): a volume, so that it outlives the
        proxy's process and nothing the agent sends can fill or rotate it."""
        self.container: str | None = None
        self.proxy_address: str | None = None
        self._volume_made = False
        self._exchanges: list[Exchange] = []

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
        if self.container is not None:
            try:
                self._exchanges = self._read_ledger()
            except SandboxError:
                pass  # exchanges() read while it ran; the labels let gc remove the rest
        self._remove()

    def exchanges(self) -> list[Exchange]:
        """The proxy's ledger, one ``Exchange`` per request it answered (and one for what
        its lines leave out, runner.sandbox.gateway_ledger); kept after exit."""
        if self.container is not None:
            self._exchanges = self._read_ledger()
        return list(self._exchanges)

    def _read_ledger(self) -> list[Exchange]:
        assert self.container is not None
        try:
            stream, _ = self.client.get_archive(self.container, LEDGER_DIR)
            return read_ledger(stream)
        except API_ERRORS as exc:
            raise SandboxError(f"Docker failed to read the model proxy's ledger: {exc}") from exc

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
        environment = {
            "DELTARUN_UPSTREAM": spec.upstream,
            "DELTARUN_LEDGER": LEDGER_DIR,
            **self._budget_environment,
        }
        if spec.api_key:
            environment["DELTARUN_UPSTREAM_KEY"] = spec.api_key
        try:
            # Empty at first: the engine fills it from the image's /ledger (the proxy's uid).
            client.create_volume(self.volume, driver="local", labels=dict(spec.labels))
            self._volume_made = True
            host_config = client.create_host_config(
                network_mode=spec.egress_network,
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                read_only=True,
                tmpfs={"/tmp": "rw,nosuid,nodev,noexec,size=16m,mode=1777"},
                mounts=[Mount(LEDGER_DIR, self.volume, type="volume")],
                # The proxy's bodies and answers are bounded to 96 MiB together
                # (runner.gateway.upstream), one answer decoded at a time, beside Python.
                mem_limit=PROXY_MEMORY,
                memswap_limit=PROXY_MEMORY,
                pids_limit=64,
                nano_cpus=500_000_000,
                init=True,
                # Never a router between the sandbox's network and the egress one.
                sysctls={"net.ipv4.ip_forward": "0"},
                # The ledger is the usage record, not this log (start-up and errors only).
                log_config=LogConfig(type="json-file", config={"max-size": "4m", "max-file": "1"}),
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
            return exit_code(self.client, exec_id) == 0
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
            return b""
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
        if self._volume_made:
            try:
                client.remove_volume(self.volume, force=True)
                self._volume_made = False
            except API_ERRORS:
                pass  # the labels let `deltarun gc` remove it later
        for _ in range(3):
            try:
                client.remove_network(self.network)
                return
            except docker.errors.NotFound:
                return
            except API_ERRORS:
                time.sleep(0.2)  # an endpoint still being torn down; else gc removes it


def open_gateway(
    client: docker.APIClient, access: ModelAccess, labels: Mapping[str, str], worker: str | None
) -> ModelGateway:
    """Start a sandbox's gateway; the key is read here, on the worker, and goes nowhere else."""
    key = None
    if access.api_key_env is not None:
        try:  # a key bound to other upstreams is the operator's refusal: infrastructure
            key = model_key(access.api_key_env, upstream=access.upstream)
        except UserError as exc:
            raise SandboxError(f"{exc.message} (worker {worker})") from exc
        if key is None:
            raise SandboxError(
                f"the model key of route.api_key_env is not on worker {worker}: "
                f"{where_keys_are(access.api_key_env)}"
            )
    spec = GatewaySpec(
        access.upstream,
        key,
        labels,
        egress_network=access.egress_network,
        budget_tokens=access.budget_tokens,
        budget_usd=access.budget_usd,
        price=access.price,
        max_output_tokens=access.max_output_tokens,
    )
    gateway = ModelGateway(client, spec)
    gateway.__enter__()
    return gateway
