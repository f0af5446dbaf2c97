"""Real Redis servers and real `deltarun worker` processes for the distribution tests."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import redis

from tests.helpers import ADD_GOLD, make_suite, repo_task, write_agent

ROOT = Path(__file__).resolve().parents[1]
DELTARUN = str(ROOT / ".venv" / "bin" / "deltarun")
# Short leases and frequent checks so that recovery happens within seconds in tests.
FAST_ENV = {"DELTARUN_LEASE_TTL_S": "4", "DELTARUN_REQUEUE_CHECK_S": "1"}


def session_key() -> bytes:
    """The job key of this test session (``conftest.session_job_key``)."""
    return Path(os.environ["DELTARUN_JOB_KEY_FILE"]).read_text().strip().encode()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def make_secrets(directory: Path) -> Path:
    """``scripts/make-certs.sh`` into ``directory`` (CA, certificates, ACL user, job key)."""
    made = subprocess.run(
        ["bash", str(ROOT / "scripts" / "make-certs.sh"), str(directory)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    return directory


class RedisServer:
    """A redis-server on a free loopback port with the append-only file on; with ``tls``
    (a directory made by ``make_secrets``) it speaks only TLS, asks for a client
    certificate and admits only the ACL user deltarun with its password."""

    def __init__(self, directory: Path, fsync: str = "always", tls: Path | None = None) -> None:
        self.directory = directory
        self.fsync = fsync
        self.tls = tls
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The URL with the password (TLS files not included: see ``tls_args``)."""
        if self.tls is None:
            return f"redis://127.0.0.1:{self.port}/0"
        return (self.tls / "broker.url").read_text().strip().replace(":6379/", f":{self.port}/")

    def tls_args(self) -> list[str]:
        assert self.tls is not None
        return [
            *("--broker-ca", str(self.tls / "ca.crt")),
            *("--broker-cert", str(self.tls / "client.crt")),
            *("--broker-key", str(self.tls / "client.key")),
        ]

    def client(self) -> redis.Redis:
        if self.tls is None:
            return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=10)
        return redis.Redis.from_url(
            self.url,
            socket_timeout=10,
            ssl_ca_certs=str(self.tls / "ca.crt"),
            ssl_certfile=str(self.tls / "client.crt"),
            ssl_keyfile=str(self.tls / "client.key"),
        )

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        listen = ["--port", str(self.port)]
        if self.tls is not None:
            files = self.tls / "redis"
            listen = [
                *("--port", "0", "--tls-port", str(self.port)),
                *("--tls-cert-file", str(files / "redis.crt")),
                *("--tls-key-file", str(files / "redis.key")),
                *("--tls-ca-cert-file", str(files / "ca.crt")),
                *("--tls-auth-clients", "yes", "--aclfile", str(files / "users.acl")),
            ]
        self.process = subprocess.Popen(
            [
                "redis-server",
                *listen,
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.directory),
                "--appendonly",
                "yes",
                "--appendfsync",
                self.fsync,
                "--save",
                "",
                "--maxmemory-policy",
                "noeviction",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                if self.client().ping():
                    return
            except redis.RedisError:
                time.sleep(0.1)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()  # SIGTERM: Redis flushes its append-only file and exits
            self.process.wait(timeout=20)
        self.process = None


class Proc:
    """A deltarun subprocess in its own session, killed with its children at the end."""

    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        self.handle = log.open("ab")
        self.process = subprocess.Popen(
            [DELTARUN, *args],
            stdout=self.handle,
            stderr=subprocess.STDOUT,
            env={**os.environ, **FAST_ENV, **(env or {})},
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait(self, timeout: float) -> int:
        return self.process.wait(timeout=timeout)

    def kill(self, sig: int = signal.SIGKILL, group: bool = False) -> None:
        try:
            if group:
                os.killpg(self.process.pid, sig)
            else:
                os.kill(self.process.pid, sig)
        except ProcessLookupError:
            pass

    def group_gone(self) -> bool:
        """Whether every process of its group (its own children too) has ended: a zombie
        is gone, as ``runner.sandbox.reaper`` judges an owner."""
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text(errors="replace").rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[2] == str(self.process.pid) and fields[0] not in ("Z", "X"):
                return False
        return True

    def stop(self) -> None:
        self.kill(signal.SIGKILL, group=True)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
        self.handle.close()


def start_worker(
    server: RedisServer,
    log: Path,
    *extra: str,
    name: str = "w1",
    env: dict[str, str] | None = None,
    broker: list[str] | None = None,
) -> Proc:
    """A ``deltarun worker`` on ``server`` (``broker``: the broker options, default
    ``--broker URL``), returned once it consumes its queues."""
    worker = Proc(
        ["worker", *(broker or ["--broker", server.url]), "--name", name, *extra],
        log,
        env={"DELTARUN_CACHE": str(log.parent / f"cache-{name}"), **(env or {})},
    )
    deadline = time.time() + 60
    while time.time() < deadline:
        if "deltarun worker" in worker.text() and "[queues]" in worker.text():
            return worker
        if worker.process.poll() is not None:
            raise RuntimeError(f"worker exited: {worker.text()}")
        time.sleep(0.2)
    raise RuntimeError(f"worker did not start: {worker.text()}")


def start_coordinator(server: RedisServer, controls: Path, out: Path, *extra: str) -> Proc:
    """``deltarun run CONTROLS --out OUT --broker URL`` in the background, logging beside OUT."""
    return Proc(
        ["run", str(controls), "--out", str(out), "--broker", server.url, *extra],
        out.parent / f"coordinator-{out.name}.log",
    )


def run_on_two_workers(
    server: RedisServer, controls: Path, out: Path, env: dict[str, str]
) -> list[Proc]:
    """A coordinator's run of ``controls`` into ``out`` on workers w1 and w2 (``-c 2`` each,
    with ``env``), every process stopped after; the coordinator must exit 0. The workers and
    the coordinator, last, to read their logs."""
    procs: list[Proc] = []
    try:
        for name in ("w1", "w2"):
            log = out.parent / f"{name}.log"
            procs.append(start_worker(server, log, "-c", "2", name=name, env=env))
        coordinator = start_coordinator(server, controls, out)
        procs.append(coordinator)
        assert coordinator.wait(400) == 0, coordinator.text()
    finally:
        for proc in procs:
            proc.stop()
    return procs


# The gate of ``slow_suite(gated=True)``: files in the agent sandbox's /tmp.
GATE_WAITING = "/tmp/deltarun-test-gate.waiting"
GATE_OPEN = "/tmp/deltarun-test-gate.open"


def slow_suite(root: Path, tasks: int = 4, sleep_s: float = 2.0, gated: bool = False) -> Path:
    """Deterministic: the control misses every task, the candidate fixes each after a pause.

    ``gated``: instead of the pause, the candidate's agent waits at a gate until the test
    opens it (``open_gate``), and the task's time limit is long: a trial cannot end before
    the test lets it.
    """
    pause = f"sleep {sleep_s}\n"
    if gated:
        pause = f"touch {GATE_WAITING}\nwhile [ ! -e {GATE_OPEN} ]; do sleep 0.2; done\n"
    slow = write_agent(root, "slow", f"{pause}sed -i 's/a - b/a + b/' calc/__init__.py\n")
    (root / "gold").mkdir(exist_ok=True)
    for i in range(tasks):
        (root / "gold" / f"t{i}.diff").write_text(ADD_GOLD)
    return make_suite(
        root,
        [repo_task(f"t{i}", timeout_s=900 if gated else 60) for i in range(tasks)],
        [
            {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
            {"name": "slow", "agent": slow},
        ],
    )


def _in_sandbox(api: Any, container: str, *argv: str) -> bool:
    """Whether ``argv`` exits 0 in the container (False once it is gone or stopped)."""
    import docker.errors

    try:
        exec_id = api.exec_create(container, list(argv))["Id"]
        api.exec_start(exec_id)
        return bool(api.exec_inspect(exec_id)["ExitCode"] == 0)
    except docker.errors.APIError:
        return False


def at_gate(api: Any, worker: str, job: str | None = None) -> tuple[str, str] | None:
    """(container, job id) of a sandbox of ``worker`` (of ``job``) whose agent waits at the
    gate of ``slow_suite(gated=True)``, or None for now."""
    labels = [f"deltarun.worker={worker}", *([f"deltarun.job={job}"] if job else [])]
    for container in api.containers(filters={"label": labels}):
        if _in_sandbox(api, container["Id"], "test", "-e", GATE_WAITING):
            return container["Id"], container["Labels"]["deltarun.job"]
    return None


def open_gate(api: Any, container: str) -> None:
    """Let the agent waiting at the gate in ``container`` go on."""
    assert _in_sandbox(api, container, "touch", GATE_OPEN), f"the gate of {container[:12]}"


def wait_for(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def leases(client: redis.Redis) -> dict[str, str]:
    return {k.decode(): (client.get(k) or b"").decode() for k in client.keys("deltarun:lease:*")}


def ledger_lines(run: Path) -> list[dict[str, Any]]:
    path = run / "trials.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def essence(run: Path) -> dict[str, Any]:
    """The report without what legitimately differs between two runs (ids, times, hosts)."""
    report = json.loads((run / "report.json").read_text())
    report.pop("pins")
    for arm in report["arms"]:
        arm.pop("wall_s_per_task")
    for delta in report["deltas"]:
        delta.pop("control_run_id")
        delta.pop("candidate_run_id")
        delta.pop("suite_id")
        delta["control_detail"].pop("wall_s_per_task")
        delta["candidate_detail"].pop("wall_s_per_task")
        delta.pop("generated_at")
    return report
