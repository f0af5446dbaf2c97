"""`network: model-only`: a sandbox reaches one model endpoint through the gateway, nothing else.

Real Docker throughout. The "model" is a fake chat-completions and messages server in a container on
a network this module creates; every request goes from a container to a container on a
network made here (never to the host, the LAN or the internet).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker.errors
import pytest

from runner.errors import SandboxError, UserError
from runner.gateway import sources as gateway_sources
from runner.sandbox.docker import process_identity
from runner.sandbox.gateway_container import (
    GATEWAY_ALIAS,
    PROXY_IMAGE,
    Exchange,
    GatewaySpec,
    ModelGateway,
)
from runner.sandbox.reaper import reap, reap_orphans
from tests.helpers import PY_IMAGE

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[1]
KEY = "sekret"
QUICK_DNS = "timeout:1 attempts:1"

FAKE_MODEL = r"""
import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ANSWER = {
    "id": "x", "object": "chat.completion", "model": "m-1",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
}
MESSAGE = {
    "id": "msg", "type": "message", "role": "assistant", "model": "c-1",
    "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}],
    "usage": {"input_tokens": 5, "cache_read_input_tokens": 40,
              "cache_creation_input_tokens": 2, "output_tokens": 6},
}

def masked(value):
    # What the model saw, told without echoing the key (the gateway withholds an echo).
    return value.replace("sekret", "<real key>") if value else value

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        auth = masked(self.headers.get("Authorization"))
        print(json.dumps({"path": self.path, "authorization": auth}), flush=True)
        if self.command == "POST" and self.path == "/v1/chat/completions":
            status, payload = 200, dict(ANSWER, seen={"authorization": auth,
                                                      "host": self.headers.get("Host")})
        elif self.command == "POST" and self.path == "/v1/messages":
            status, payload = 200, dict(MESSAGE, seen={
                "authorization": auth, "x-api-key": masked(self.headers.get("x-api-key"))})
        else:
            status, payload = 404, {"error": {"message": "no such route"}}
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-Saw-Key", "yes" if auth == "Bearer <real key>" else "no")
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = answer

    def log_message(self, *args):
        pass

ThreadingHTTPServer(("0.0.0.0", 8000), Handler).serve_forever()
"""

CHAT = r"""
import json, sys, urllib.error, urllib.request
request = urllib.request.Request(
    sys.argv[1],
    data=json.dumps({"model": "m-1", "messages": [{"role": "user", "content": "hi"}]}).encode(),
    headers={"Content-Type": "application/json", "Authorization": "Bearer agent-guess",
             "x-api-key": "agent-guess", "anthropic-version": "2023-06-01"},
)
try:
    with urllib.request.urlopen(request, timeout=30) as response:
        status, headers, body = response.status, dict(response.headers), response.read()
except urllib.error.HTTPError as exc:
    status, headers, body = exc.code, dict(exc.headers), exc.read()
print(json.dumps({"status": status, "headers": headers, "body": json.loads(body)}))
"""

RAW_REQUESTS = r"""
import http.client, json, sys
results = {}
for line in sys.argv[1:]:
    method, target = line.split(" ", 1)
    connection = http.client.HTTPConnection("model-gateway", 8080, timeout=30)
    body = b"{}" if method == "POST" else None
    connection.request(method, target, body=body, headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    results[line] = [response.status, response.read().decode("utf-8", "replace")]
    connection.close()
print(json.dumps(results))
"""

CONNECT = r"""
import json, socket, sys, time
host, port = sys.argv[1], int(sys.argv[2])
started = time.monotonic()
try:
    socket.create_connection((host, port), timeout=5).close()
    outcome = "connected"
except OSError as exc:
    outcome = f"{type(exc).__name__}: {exc}"
print(json.dumps({"outcome": outcome, "seconds": round(time.monotonic() - started, 2)}))
"""

RESOLVE = r"""
import json, socket, sys
found = {}
for name in sys.argv[1:]:
    try:
        found[name] = sorted({info[4][0] for info in socket.getaddrinfo(name, 80)})
    except OSError as exc:
        found[name] = type(exc).__name__
print(json.dumps(found))
"""


PORT_OPEN = 'import socket; socket.create_connection(("127.0.0.1", 8000), 1).close()'


@dataclass
class World:
    """The test network with the fake model on it, and the labels of this module."""

    network: str
    fake: str
    fake_ip: str
    labels: dict[str, str]
    worker: str


def labels_for(worker: str, run: str, *, pid: str | None = None) -> dict[str, str]:
    return {
        "deltarun.run": run,
        "deltarun.job": "model-gateway-test",
        "deltarun.worker": worker,
        "deltarun.pid": pid or process_identity(os.getpid()),
        "deltarun.deadline": str(int(time.time() + 900)),
    }


def exec_python(
    api: Any, container: str, code: str, *args: str, env: dict[str, str] | None = None
) -> Any:
    """Run ``python3 -c code args`` as uid 1000 in a container; its stdout parsed as JSON."""
    argv = ["python3", "-c", code, *args]
    exec_id = api.exec_create(container, argv, user="1000", environment=env or {})["Id"]
    out = api.exec_start(exec_id, demux=True)
    code_ = api.exec_inspect(exec_id)["ExitCode"]
    stdout, stderr = (out[0] or b"").decode(), (out[1] or b"").decode()
    assert code_ == 0, f"exit {code_}: {stdout}{stderr}"
    return json.loads(stdout)


def run(api: Any, container: str, argv: list[str], user: str = "1000") -> tuple[int, str]:
    """Run a command in a container; its exit code and output."""
    exec_id = api.exec_create(container, argv, user=user)["Id"]
    out = api.exec_start(exec_id)
    return int(api.exec_inspect(exec_id)["ExitCode"]), out.decode("utf-8", "replace")


def exec_sh(api: Any, container: str, script: str) -> tuple[int, str]:
    return run(api, container, ["sh", "-c", script])


def hardened_host_config(api: Any, network_mode: str, **extra: Any) -> Any:
    return api.create_host_config(
        network_mode=network_mode,
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        read_only=True,
        tmpfs={"/tmp": "rw,nosuid,nodev,size=16m,mode=1777"},
        mem_limit=256 << 20,
        pids_limit=64,
        init=True,
        **extra,
    )


@contextlib.contextmanager
def client_container(api: Any, gateway: ModelGateway, labels: dict[str, str]) -> Iterator[str]:
    """A sandbox-like container on the gateway's network, as the other engineer's code makes it."""
    host_config = hardened_host_config(api, gateway.network, dns=gateway.sandbox_dns)
    container = str(
        api.create_container(
            PY_IMAGE,
            command=["sleep", "300"],
            user="1000",
            labels=labels,
            environment={},
            host_config=host_config,
        )["Id"]
    )
    try:
        api.start(container)
        yield container
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            api.remove_container(container, force=True)


def gone(inspect: Any, name: str) -> bool:
    try:
        inspect(name)
    except docker.errors.NotFound:
        return True
    return False


@pytest.fixture(scope="module")
def world(docker_api: Any, proxy_image: str) -> Iterator[World]:
    worker = f"gw-test-{uuid.uuid4().hex[:8]}"
    labels = labels_for(worker, f"run-{worker}")
    network = f"deltarun-test-{uuid.uuid4().hex[:12]}"
    fake = None
    docker_api.create_network(network, driver="bridge", labels=labels)
    try:
        endpoint = docker_api.create_endpoint_config(aliases=["fake-model"])
        fake = str(
            docker_api.create_container(
                PY_IMAGE,
                command=["python3", "-c", FAKE_MODEL],
                user="1000",
                labels=labels,
                host_config=hardened_host_config(docker_api, network),
                networking_config=docker_api.create_networking_config({network: endpoint}),
            )["Id"]
        )
        docker_api.start(fake)
        for _ in range(100):
            if run(docker_api, fake, ["python3", "-c", PORT_OPEN])[0] == 0:
                break
            time.sleep(0.1)
        else:
            pytest.fail("the fake model did not start")
        ip = docker_api.inspect_container(fake)["NetworkSettings"]["Networks"][network]["IPAddress"]
        yield World(network, fake, ip, labels, worker)
    finally:
        if fake is not None:
            docker_api.remove_container(fake, force=True)
        docker_api.remove_network(network)
        reap(docker_api, dry_run=False, include_live=True, worker=worker)  # anything left


@pytest.fixture(scope="module")
def gateway(docker_api: Any, world: World) -> Iterator[ModelGateway]:
    spec = GatewaySpec(
        upstream="http://fake-model:8000/v1",
        api_key=KEY,
        labels=world.labels,
        egress_network=world.network,
    )
    with ModelGateway(docker_api, spec) as opened:
        yield opened


@pytest.fixture(scope="module")
def sandbox(docker_api: Any, gateway: ModelGateway, world: World) -> Iterator[str]:
    with client_container(docker_api, gateway, world.labels) as container:
        yield container


def fake_model_paths(api: Any, world: World) -> list[str]:
    lines = api.logs(world.fake, stdout=True, stderr=False).decode().splitlines()
    return [json.loads(line)["path"] for line in lines if line.startswith("{")]


def test_agent_base_url_and_network(docker_api: Any, gateway: ModelGateway, world: World) -> None:
    assert gateway.agent_base_url == f"http://{GATEWAY_ALIAS}:8080/v1"
    assert gateway.network.startswith("deltarun-mo-") and len(gateway.network) == 28
    network = docker_api.inspect_network(gateway.network)
    assert network["Internal"] is True and network["Driver"] == "bridge"
    assert network["Labels"] == world.labels
    proxy = docker_api.inspect_container(gateway.container)
    host = proxy["HostConfig"]
    assert host["CapDrop"] == ["ALL"] and host["ReadonlyRootfs"] is True
    assert host["SecurityOpt"] == ["no-new-privileges"] and host["Init"] is True
    assert host["Memory"] == host["MemorySwap"] == 256 << 20 and host["PidsLimit"] == 64
    assert proxy["Config"]["User"] == "1000:1000"
    assert world.labels.items() <= proxy["Config"]["Labels"].items()  # plus the image's
    assert run(docker_api, gateway.container, ["cat", "/proc/sys/net/ipv4/ip_forward"]) == (
        0,
        "0\n",
    )
    for name, source in sorted(gateway_sources().items()):
        shipped = run(docker_api, gateway.container, ["cat", f"/opt/proxy/gateway/{name}"])
        assert shipped == (0, source.decode()), (
            f"{PROXY_IMAGE} does not run this {name}: rebuild it"
        )
    aliases = proxy["NetworkSettings"]["Networks"][gateway.network]["Aliases"]
    assert GATEWAY_ALIAS in aliases
    assert set(proxy["NetworkSettings"]["Networks"]) == {world.network, gateway.network}


def test_chat_completion_goes_through_with_the_key_added(
    docker_api: Any, gateway: ModelGateway, sandbox: str, world: World
) -> None:
    url = gateway.agent_base_url + "/chat/completions"
    result = exec_python(docker_api, sandbox, CHAT, url)
    assert result["status"] == 200, result
    body = result["body"]
    assert body["model"] == "m-1" and body["choices"][0]["message"]["content"] == "hi"
    # The upstream saw the proxy's key, not the agent's header, and its own host name.
    assert body["seen"] == {"authorization": "Bearer <real key>", "host": "fake-model:8000"}
    assert result["headers"]["X-Saw-Key"] == "yes"
    # The key was never in the sandbox: not in its configuration, environment or files.
    assert KEY not in json.dumps(docker_api.inspect_container(sandbox)["Config"])
    code, env = exec_sh(docker_api, sandbox, "env; cat /proc/1/environ")
    assert code == 0 and KEY not in env
    search = "grep -rlsI --exclude-dir=proc --exclude-dir=sys -e {} / ; true"
    assert exec_sh(docker_api, sandbox, search.format("'sek''ret'")) == (0, "")
    assert "/etc/passwd" in exec_sh(docker_api, sandbox, search.format("agent:x:1000"))[1]
    # Anthropic Messages: the key goes as x-api-key, and the agent's headers are dropped.
    result = exec_python(docker_api, sandbox, CHAT, gateway.agent_base_url + "/messages")
    assert result["body"]["seen"] == {"authorization": None, "x-api-key": "<real key>"}


def test_upstream_unreachable_except_through_the_proxy(
    docker_api: Any, gateway: ModelGateway, sandbox: str, world: World
) -> None:
    direct = exec_python(docker_api, sandbox, CONNECT, world.fake_ip, "8000")
    assert direct["outcome"] != "connected", direct
    # Other ports of the proxy are closed; names outside the network do not resolve.
    other = exec_python(docker_api, sandbox, CONNECT, GATEWAY_ALIAS, "8000")
    assert other["outcome"].startswith("ConnectionRefusedError"), other
    # (Unknown names go to the proxy, which serves no DNS; one short try is enough.)
    names = exec_python(
        docker_api, sandbox, RESOLVE, GATEWAY_ALIAS, "fake-model", env={"RES_OPTIONS": QUICK_DNS}
    )
    assert names[GATEWAY_ALIAS] == [gateway.proxy_address]
    assert names["fake-model"] == "gaierror"


def test_paths_outside_the_prefix_are_refused(
    docker_api: Any, gateway: ModelGateway, sandbox: str, world: World
) -> None:
    refused = [
        "GET /etc/passwd",
        "GET /",
        "GET /v1/../etc/passwd",
        "GET /v1/%2e%2e/admin",
        "GET /v1//x",
        "GET /v10/models",
        "POST /v2/chat/completions",
        "GET http://fake-model:8000/v1/models",
    ]
    results = exec_python(docker_api, sandbox, RAW_REQUESTS, *refused, "GET /v1/models?limit=1")
    for line in refused:
        status, body = results[line]
        assert status == 403, (line, status, body)
        assert "only /v1/... is forwarded" in json.loads(body)["error"]["message"]
    # An allowed path reaches the upstream, whatever it answers (here 404).
    assert results["GET /v1/models?limit=1"][0] == 404
    paths = fake_model_paths(docker_api, world)
    assert "/v1/models?limit=1" in paths
    assert not [p for p in paths if "etc" in p or "admin" in p or not p.startswith("/v1/")]


def test_request_body_cap(docker_api: Any, gateway: ModelGateway, sandbox: str) -> None:
    code = r"""
import http.client, json
connection = http.client.HTTPConnection("model-gateway", 8080, timeout=30)
connection.request("POST", "/v1/chat/completions", body=b"x" * (9 << 20))
print(json.dumps(connection.getresponse().status))
"""
    assert exec_python(docker_api, sandbox, code) == 413


def test_exchanges_report_model_and_tokens(
    docker_api: Any, gateway: ModelGateway, sandbox: str
) -> None:
    earlier = len(gateway.exchanges())  # the module's gateway: other tests' exchanges first
    exec_python(docker_api, sandbox, CHAT, gateway.agent_base_url + "/chat/completions")
    exec_python(docker_api, sandbox, CHAT, gateway.agent_base_url + "/messages")
    exchanges = gateway.exchanges()[earlier:]
    chat = next(e for e in exchanges if e.path == "/v1/chat/completions")
    assert chat == Exchange(
        "/v1/chat/completions", 200, "m-1", 7, 3, latency_ms=chat.latency_ms, models=("m-1",)
    )
    message = next(e for e in exchanges if e.path == "/v1/messages")  # cache reads and writes
    assert message == Exchange(  # count as input, for every API
        "/v1/messages", 200, "c-1", 47, 6, 40, 2, message.latency_ms, ("Bash",), False, ("c-1",)
    )
    assert all(e.path != "/__deltarun_ready" for e in exchanges)
    logs = docker_api.logs(gateway.container, stdout=True, stderr=True).decode()
    assert KEY not in logs and "agent-guess" not in logs


FLOOD = r"""
import http.client, json
statuses = []
for _ in range(120):
    connection = http.client.HTTPConnection("model-gateway", 8080, timeout=30)
    connection.request("POST", "/v1/" + "x" * 60_000, body=b"{}")
    statuses.append(connection.getresponse().status)
    connection.close()
print(json.dumps(sorted(set(statuses))))
"""


def test_a_refused_flood_cannot_push_a_billed_exchange_out_of_the_ledger(
    docker_api: Any, world: World
) -> None:
    spec = GatewaySpec("http://fake-model:8000/v1", KEY, world.labels, world.network)
    with (
        ModelGateway(docker_api, spec) as gateway,
        client_container(docker_api, gateway, world.labels) as container,
    ):
        chat = exec_python(
            docker_api, container, CHAT, gateway.agent_base_url + "/chat/completions"
        )
        assert chat["status"] == 200
        assert exec_python(docker_api, container, FLOOD) == [403]  # 7 MB of paths
    exchanges = gateway.exchanges()  # read at exit, from the ledger's volume
    first = exchanges[0]
    assert (first.status, first.prompt_tokens, first.completion_tokens) == (200, 7, 3)
    assert sum(e.prompt_tokens for e in exchanges) == 7 and len(exchanges) == 121
    assert all(len(e.path) < 300 for e in exchanges)
    assert docker_api.volumes(filters={"name": gateway.volume})["Volumes"] in (None, [])


def test_the_ledger_outlives_a_killed_proxy(docker_api: Any, world: World) -> None:
    spec = GatewaySpec("http://fake-model:8000/v1", KEY, world.labels, world.network)
    with (
        ModelGateway(docker_api, spec) as gateway,
        client_container(docker_api, gateway, world.labels) as container,
    ):
        url = gateway.agent_base_url + "/chat/completions"
        assert exec_python(docker_api, container, CHAT, url)["status"] == 200
        docker_api.kill(gateway.container)  # out of memory, say: the process is gone
        docker_api.wait(gateway.container, timeout=30)
        assert [(e.status, e.prompt_tokens) for e in gateway.exchanges()] == [(200, 7)]
    assert [(e.status, e.prompt_tokens) for e in gateway.exchanges()] == [(200, 7)]


HOLD_OPEN = r"""
import json, socket, threading, time
held, statuses = [], []
CRLF = bytes([13, 10])
body = memoryview(b"x" * ((8 << 20) - 1))

def hold():
    sock = socket.create_connection(("model-gateway", 8080), timeout=60)
    held.append(sock)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1" + CRLF + b"Host: g" + CRLF
                 + b"Content-Length: %d" % (8 << 20) + CRLF + CRLF)
    try:
        sock.sendall(body)  # all but the last byte: the body is held open
        sock.settimeout(35)  # the proxy waits 30 s for room before it refuses
        statuses.append(sock.recv(12)[9:12].decode() or "closed")
    except TimeoutError:
        statuses.append("held")  # being read: still waiting for its last byte
    except OSError:
        statuses.append("refused")  # 503 and closed, its body unread

threads = [threading.Thread(target=hold) for _ in range(24)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join(60)
print(json.dumps(sorted(statuses)))
"""


def test_bodies_held_open_cannot_starve_the_proxy(docker_api: Any, world: World) -> None:
    spec = GatewaySpec("http://fake-model:8000/v1", KEY, world.labels, world.network)
    with (
        ModelGateway(docker_api, spec) as gateway,
        client_container(docker_api, gateway, world.labels) as container,
    ):
        statuses = exec_python(docker_api, container, HOLD_OPEN)
        state = docker_api.inspect_container(gateway.container)["State"]
        assert state["Running"] and not state["OOMKilled"], state
        # 12 bodies fit the proxy's 96 MiB pool and are still being read; the others were
        # refused (503, their bodies unread: the client sees its connection closed).
        assert statuses.count("held") == 12, statuses
        assert set(statuses) <= {"held", "refused", "503"}, statuses
        chat = exec_python(
            docker_api, container, CHAT, gateway.agent_base_url + "/chat/completions"
        )
        assert chat["status"] == 200
        assert [e.prompt_tokens for e in gateway.exchanges() if e.status == 200] == [7]


def test_without_a_key_the_agents_authorization_is_dropped(docker_api: Any, world: World) -> None:
    spec = GatewaySpec("http://fake-model:8000/v1/", None, world.labels, world.network)
    with (
        ModelGateway(docker_api, spec) as gateway,
        client_container(docker_api, gateway, world.labels) as container,
    ):
        assert gateway.agent_base_url == "http://model-gateway:8080/v1"
        result = exec_python(
            docker_api, container, CHAT, gateway.agent_base_url + "/chat/completions"
        )
        assert result["status"] == 200
        assert result["body"]["seen"]["authorization"] is None


def test_the_budget_reaches_the_proxy(docker_api: Any, gateway: ModelGateway, world: World) -> None:
    spec = dataclasses.replace(gateway.spec, budget_tokens=10, price={"input": 1, "output": 1})
    with (
        ModelGateway(docker_api, spec) as limited,
        client_container(docker_api, limited, world.labels) as container,
    ):
        url, before = (
            limited.agent_base_url + "/chat/completions",
            fake_model_paths(docker_api, world),
        )
        assert [exec_python(docker_api, container, CHAT, url)["status"] for _ in "ab"] == [200, 402]
        assert [e.budget_exhausted for e in limited.exchanges()] == [False, True]  # 7 + 3 tokens
        assert len(fake_model_paths(docker_api, world)) == len(before) + 1  # the 402 stayed here


def test_exit_removes_network_and_proxy(docker_api: Any, world: World) -> None:
    spec = GatewaySpec("http://fake-model:8000/v1", KEY, world.labels, world.network)
    started = time.monotonic()
    with ModelGateway(docker_api, spec) as gateway:
        entered = time.monotonic() - started
        container = gateway.container
        assert container is not None and not gone(docker_api.inspect_network, gateway.network)
    total = time.monotonic() - started
    assert gone(docker_api.inspect_container, container)
    assert gone(docker_api.inspect_network, gateway.network)
    assert gateway.exchanges() == []  # kept from the log read at exit: nothing was asked
    print(f"gateway enter {entered:.2f}s, enter+exit {total:.2f}s")


def test_upstream_must_be_a_plain_http_url(docker_api: Any) -> None:
    for url in ("ftp://model/v1", "http:///v1", "https://user:pw@model/v1", "http://m/v1?k=1"):
        with pytest.raises(UserError, match="must be an http") as caught:
            ModelGateway(docker_api, GatewaySpec(url, KEY, {}))
        assert "pw" not in str(caught.value)
    assert KEY not in repr(GatewaySpec("http://m/v1", KEY, {}))


def test_failures_leave_nothing_behind(docker_api: Any, world: World) -> None:
    run = f"fail-{uuid.uuid4().hex[:8]}"
    labels = {**world.labels, "deltarun.run": run}
    bad_image = GatewaySpec(
        "http://fake-model:8000/v1", KEY, labels, world.network, "deltarun/nope:0"
    )
    with (
        pytest.raises(SandboxError, match="model proxy image 'deltarun/nope:0' is not present"),
        ModelGateway(docker_api, bad_image),
    ):
        pass
    bad_egress = GatewaySpec("http://fake-model:8000/v1", KEY, labels, "deltarun-no-such-net")
    with (
        pytest.raises(SandboxError, match="network deltarun-no-such-net not found"),
        ModelGateway(docker_api, bad_egress),
    ):
        pass
    selector = {"label": [f"deltarun.run={run}"]}
    assert docker_api.networks(filters=selector) == []
    assert docker_api.containers(all=True, filters=selector) == []


def test_reap_removes_a_gateway_left_behind(docker_api: Any, world: World) -> None:
    worker = f"gw-reap-{uuid.uuid4().hex[:8]}"
    spec = GatewaySpec("http://fake-model:8000/v1", KEY, labels_for(worker, "r"), world.network)
    gateway = ModelGateway(docker_api, spec)
    gateway.__enter__()  # a crashed worker: never exited
    try:
        container = gateway.container
        assert container is not None
        lines = reap(docker_api, dry_run=False, include_live=True, worker=worker)
        assert f"removed container {container[:12]} (job model-gatewa)" in lines
        assert f"removed network {gateway.network}" in lines
        assert gone(docker_api.inspect_container, container)
        assert gone(docker_api.inspect_network, gateway.network)
    finally:
        gateway.__exit__(None, None, None)


def test_reap_orphans_removes_networks_of_dead_owners(docker_api: Any) -> None:
    worker = f"gw-orphan-{uuid.uuid4().hex[:8]}"
    dead = labels_for(worker, "o", pid="999999999:1")
    alive = labels_for(worker, "o")
    names = [f"deltarun-mo-test-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    for name, labels in zip(names, (dead, alive), strict=True):
        docker_api.create_network(name, driver="bridge", internal=True, labels=labels)
    try:
        lines = reap_orphans(docker_api, worker)
        assert lines == [f"removed orphaned network {names[0]}"]
        assert gone(docker_api.inspect_network, names[0])
        assert not gone(docker_api.inspect_network, names[1])
    finally:
        for name in names:
            with contextlib.suppress(docker.errors.NotFound):
                docker_api.remove_network(name)
