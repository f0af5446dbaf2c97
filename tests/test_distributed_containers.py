"""Three worker containers and a Redis container on a private Docker network; one is killed.

The coordinator runs on the host and reaches the Redis container through a port
published on 127.0.0.1 only; workers reach it by name on the private network.
"""

from __future__ import annotations

import os
import secrets
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import IN_CI
from tests.distributed_support import Proc, essence, leases, ledger_lines, slow_suite, wait_for
from tests.test_distributed import JOBS

pytestmark = pytest.mark.docker
WORKER_IMAGE = "deltarun/worker:latest"
REDIS_IMAGE = "deltarun/redis:bookworm"


class Cluster:
    def __init__(self, api: Any) -> None:
        self.api = api
        self.tag = secrets.token_hex(4)
        self.network = f"deltarun-test-{self.tag}"
        self.containers: list[str] = []
        self.port = 0

    def start(self) -> None:
        self.api.create_network(self.network, driver="bridge", labels={"deltarun.test": self.tag})
        host_config = self.api.create_host_config(
            port_bindings={6379: ("127.0.0.1", None)}, network_mode=self.network
        )
        redis_c = self.api.create_container(
            REDIS_IMAGE,
            name=f"redis-{self.tag}",
            host_config=host_config,
            ports=[6379],
            networking_config=self.api.create_networking_config(
                {self.network: self.api.create_endpoint_config(aliases=["redis"])}
            ),
            labels={"deltarun.test": self.tag},
        )["Id"]
        self.containers.append(redis_c)
        self.api.start(redis_c)
        self.port = int(self.api.port(redis_c, 6379)[0]["HostPort"])
        import redis

        client = redis.Redis(host="127.0.0.1", port=self.port)
        wait_for(lambda: _ping(client), 30, "the Redis container")
        for index in range(3):
            self.worker(f"cw{index}-{self.tag}")

    def worker(self, name: str) -> str:
        host_config = self.api.create_host_config(
            binds={"/var/run/docker.sock": {"bind": "/var/run/docker.sock", "mode": "rw"}},
            network_mode=self.network,
        )
        container = self.api.create_container(
            WORKER_IMAGE,
            name=name,
            hostname=name,
            host_config=host_config,
            command=["worker", "--broker", "redis://redis:6379/0", "-c", "1"],
            environment={
                "DELTARUN_LEASE_TTL_S": "4",
                "DELTARUN_JOB_KEY": Path(os.environ["DELTARUN_JOB_KEY_FILE"]).read_text().strip(),
            },
            labels={"deltarun.test": self.tag},
        )["Id"]
        self.containers.append(container)
        self.api.start(container)
        return container

    def logs(self, container: str) -> str:
        return self.api.logs(container).decode(errors="replace")

    def stop(self) -> None:
        from runner.sandbox.reaper import reap_orphans

        for container in self.containers:
            try:
                self.api.remove_container(container, force=True, v=True)
            except Exception:
                pass
        for index in range(3):  # sandboxes a killed worker container left behind
            reap_orphans(self.api, f"cw{index}-{self.tag}")
        try:
            self.api.remove_network(self.network)
        except Exception:
            pass


def _ping(client: Any) -> bool:
    try:
        return bool(client.ping())
    except Exception:
        return False


@pytest.fixture
def cluster(docker_api: Any) -> Iterator[Cluster]:
    missing = [i for i in (WORKER_IMAGE, REDIS_IMAGE) if not docker_api.images(name=i)]
    if missing:
        message = f"images {missing} are missing; run `make worker-images`"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    c = Cluster(docker_api)
    try:
        c.start()
        yield c
    finally:
        c.stop()


def test_three_worker_containers_one_killed(
    tmp_path: Path,
    cluster: Cluster,
    reference: dict[str, Any],
    docker_api: Any,
) -> None:
    controls = slow_suite(tmp_path, sleep_s=2.0)
    out = tmp_path / "run"
    coordinator = Proc(
        [
            "run",
            str(controls),
            "--out",
            str(out),
            "--broker",
            f"redis://127.0.0.1:{cluster.port}/0",
        ],
        tmp_path / "coordinator.log",
    )
    try:
        import redis

        client = redis.Redis(host="127.0.0.1", port=cluster.port)
        holder = wait_for(lambda: next(iter(leases(client).values()), ""), 120, "a trial to start")
        victim_name = holder.rsplit(":", 1)[0]
        victim = next(
            c
            for c in cluster.containers[1:]
            if docker_api.inspect_container(c)["Config"]["Hostname"] == victim_name
        )
        docker_api.kill(victim)
        assert coordinator.wait(300) == 0, coordinator.text()
    finally:
        coordinator.stop()
    records = ledger_lines(out)
    counts = Counter(r["job_id"] for r in records)
    assert len(counts) == JOBS and set(counts.values()) == {1}, counts
    errors = [
        (r["task_id"], r["arm"], r["worker"], r.get("error"))
        for r in records
        if r["outcome"] == "error"
    ]
    assert not errors, (errors, [cluster.logs(c)[-3000:] for c in cluster.containers[1:]])
    assert essence(out) == reference
    workers = {r["worker"] for r in records}
    assert len(workers) >= 2, workers  # the work really was spread over containers
