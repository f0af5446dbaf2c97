"""compose.yaml is part of the product: brought up with Debian's docker-compose on secrets
from `make certs`, it runs a suite through two worker containers over TLS, Flower's API
answers only its basic-auth user and lists both workers, Prometheus scrapes both workers'
metrics, and `down -v` leaves nothing."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from base64 import b64encode
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import IN_CI
from tests.distributed_support import (
    DELTARUN,
    ROOT,
    free_port,
    ledger_lines,
    make_secrets,
    slow_suite,
    wait_for,
)

pytestmark = pytest.mark.docker
WORKER_IMAGE = "deltarun/worker:latest"


def _compose() -> str:
    found = shutil.which("docker-compose")
    if found is None:
        message = "docker-compose is not installed; run `make compose`"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return found


def _flower(port: int, auth: str | None) -> tuple[int, Any]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/workers?refresh=1")
    if auth is not None:
        request.add_header("Authorization", "Basic " + b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except (urllib.error.URLError, ConnectionError, ValueError):
        return 0, None


def _prometheus(port: int, query: str) -> float | None:
    """The value of an instant query, or None (not up yet, or no sample)."""
    url = f"http://127.0.0.1:{port}/api/v1/query?query={urllib.parse.quote(query)}"
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            result = json.loads(response.read())["data"]["result"]
    except (urllib.error.URLError, ConnectionError, ValueError, KeyError):
        return None
    return float(result[0]["value"][1]) if result else None


def _left(api: Any, project: str) -> list[str]:
    label = {"label": f"com.docker.compose.project={project}"}
    left = [c["Id"] for c in api.containers(all=True, filters=label)]
    left += [v["Name"] for v in (api.volumes(filters=label) or {}).get("Volumes") or []]
    left += [n["Name"] for n in api.networks(filters=label)]
    return left


def test_compose_runs_a_suite_on_two_tls_workers_and_leaves_nothing(
    tmp_path: Path, docker_api: Any
) -> None:
    compose = _compose()
    docker_api.inspect_image(WORKER_IMAGE)  # built by `make worker-images` (make test does)
    secrets_dir = make_secrets(tmp_path / "secrets")
    project = f"deltarun-test-{secrets.token_hex(4)}"
    redis_port, flower_port, prometheus_port = free_port(), free_port(), free_port()
    env = {
        **os.environ,
        "DELTARUN_SECRETS": str(secrets_dir),
        "DELTARUN_REDIS_PORT": str(redis_port),
        "DELTARUN_FLOWER_PORT": str(flower_port),
        "DELTARUN_PROMETHEUS_PORT": str(prometheus_port),
    }
    base = [compose, "-f", str(ROOT / "compose.yaml"), "-p", project, "--profile", "monitoring"]

    def run(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [*base, *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT
        )
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done

    try:
        run("up", "-d", "redis", "flower", "prometheus")
        run("up", "-d", "--scale", "worker=2", "worker")
        flower_user = (secrets_dir / "flower.env").read_text().strip().split("=", 1)[1]
        # Flower's API is closed to anyone without its user, and lists both workers.
        assert wait_for(lambda: _flower(flower_port, None)[0] or None, 60, "Flower") == 401
        assert _flower(flower_port, "flower:wrong")[0] == 401
        workers = wait_for(
            lambda: (lambda r: r[1] if r[0] == 200 and len(r[1] or {}) == 2 else None)(
                _flower(flower_port, flower_user)
            ),
            90,
            "both workers in Flower's API",
        )
        assert all(name.startswith("deltarun-") for name in workers)

        # The coordinator on the host, with the secrets from deltarun.env (the README's way).
        host_env = dict(
            line.split("=", 1)
            for line in (secrets_dir / "deltarun.env").read_text().splitlines()
            if "=" in line
        )
        host_env["DELTARUN_BROKER_URL"] = host_env["DELTARUN_BROKER_URL"].replace(
            ":6379/", f":{redis_port}/"
        )
        controls = slow_suite(tmp_path, tasks=2, sleep_s=0.2)
        out = tmp_path / "run"
        coordinator = subprocess.run(
            [DELTARUN, "run", str(controls), "--out", str(out)],
            env={**os.environ, **host_env},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert coordinator.returncode == 0, coordinator.stderr
        records = ledger_lines(out)
        assert len(records) == 4 and not [r for r in records if r["error"]]
        containers = run("ps", "-q", "worker").stdout.split()
        hostnames = {docker_api.inspect_container(c)["Config"]["Hostname"] for c in containers}
        assert {r["worker"] for r in records} <= hostnames and len(hostnames) == 2
        # Prometheus found both replicas by DNS and counts every trial they finished.
        wait_for(
            lambda: _prometheus(prometheus_port, 'count(up{job="deltarun-workers"} == 1)') == 2,
            60,
            "Prometheus to scrape both workers",
        )
        wait_for(
            lambda: (
                _prometheus(prometheus_port, "sum(deltarun_worker_trials_finished_total)")
                == len(records)
            ),
            60,
            "Prometheus to count every trial",
        )
        password = host_env["DELTARUN_BROKER_URL"].split(":")[2].split("@")[0]
        logs = run("logs", "--no-color").stdout
        assert password not in logs and password not in coordinator.stderr
    finally:
        subprocess.run(
            [*base, "down", "-v", "--remove-orphans"],
            env=env,
            capture_output=True,
            timeout=180,
            cwd=ROOT,
        )
    assert _left(docker_api, project) == []
