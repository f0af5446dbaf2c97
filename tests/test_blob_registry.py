"""Run archives kept in the image registry instead of Redis memory, and their lifecycle.

A real Redis (``redis-server``) and a real registry (Debian's ``docker-registry``,
the reference OCI registry) on loopback; the bundle is published and loaded as the
coordinator and a worker do (``runner.distributed.protocol_bundle``), and ``deltarun gc
--broker`` runs as a user would run it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.config.loader import load_controls
from runner.distributed import blob_gc, keys
from runner.distributed import protocol_bundle as bundles
from runner.distributed.blobs import BlobStore
from runner.distributed.registry_blobs import RegistryBlobs
from runner.errors import DigestMismatch
from runner.hashing import sha256_bytes
from runner.records import RepoTask
from runner.suite.load import load_suite
from tests.conftest import IN_CI, run_cli
from tests.distributed_support import RedisServer
from tests.helpers import make_suite, repo_task
from tests.test_registry import RegistryServer

LARGE = 4 << 20  # bytes of incompressible noise in each large fixture


@pytest.fixture
def registry_server(tmp_path: Path) -> Iterator[RegistryServer]:
    if shutil.which("docker-registry") is None:
        if IN_CI:
            pytest.fail("docker-registry is not installed; run `make registry`")
        pytest.skip("docker-registry is not installed")
    s = RegistryServer(tmp_path / "registry")
    s.start()
    yield s
    s.stop()


def suite_of(root: Path, n: int, *, tag: str = "") -> Path:
    """A sealed suite of ``n`` tasks whose fixtures each carry LARGE random bytes."""
    tasks = [repo_task(f"t{i}") for i in range(n)]
    fixtures = {
        f"t{i}": {"calc.py": "def add(a, b):\n    return a - b\n", "noise.bin": os.urandom(LARGE)}
        for i in range(n)
    }
    arms = [
        {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
        {"name": f"cand{tag}", "agent": {"type": "scripted", "action": "noop"}},
    ]
    return make_suite(root, tasks, arms, fixtures=fixtures)


def publish(root: Path, client: object, n: int, registry: str | None, tag: str = "") -> str:
    loaded = load_controls(suite_of(root, n, tag=tag))
    suite = load_suite(loaded.suite_path, loaded.controls.suite.sha256)
    store = BlobStore(client, root / "coordinator-cache", registry=registry)  # type: ignore[arg-type]
    blob_gc.note_run(client, f"run-{root.name}", loaded.protocol_sha256)  # type: ignore[arg-type]
    bundles.publish(loaded, suite, store)
    return loaded.protocol_sha256


def counted(pattern: str, text: str) -> int:
    found = re.search(pattern, text)
    assert found, text
    return int(found.group(1))


def used_memory(redis_server: RedisServer) -> int:
    return int(redis_server.client().info("memory")["used_memory"])


def test_a_blob_goes_to_the_registry_and_comes_back_verified(
    tmp_path: Path, redis_server: RedisServer, registry_server: RegistryServer
) -> None:
    store = BlobStore(redis_server.client(), tmp_path / "cache", registry=registry_server.address)
    digest = store.upload(b"fixture bytes")
    assert not redis_server.client().exists(keys.blob(digest))  # nothing of it in Redis
    worker = BlobStore(redis_server.client(), tmp_path / "worker", registry=registry_server.address)
    assert worker.read(digest) == b"fixture bytes"
    # Bytes that are not the digest are refused, however the registry came to send them.
    remote = RegistryBlobs(registry_server.address)
    other = sha256_bytes(b"other")
    with pytest.raises(DigestMismatch):
        _swap(remote, other, digest, tmp_path)
    assert not (tmp_path / "x").exists()


def _swap(remote: RegistryBlobs, wanted: str, held: str, tmp_path: Path) -> bool:
    """Ask for ``wanted`` and get ``held``'s bytes: a registry that lies."""
    original = remote._call

    def lying(method: str, path: str, **kwargs: object) -> object:
        return original(method, path.replace(wanted, held), **kwargs)

    remote._call = lying  # type: ignore[method-assign]
    return remote.fetch_to(wanted, tmp_path / "x")


def test_with_a_registry_redis_memory_does_not_grow_with_the_fixtures(
    tmp_path: Path, redis_server: RedisServer, registry_server: RegistryServer
) -> None:
    """8 large fixtures against 1: within 1.2x of Redis memory with the registry; without
    it, Redis holds every byte."""
    base = used_memory(redis_server)
    publish(tmp_path / "one", redis_server.client(), 1, registry_server.address)
    one = used_memory(redis_server)
    publish(tmp_path / "eight", redis_server.client(), 8, registry_server.address)
    eight = used_memory(redis_server)
    assert eight <= 1.2 * one, (base, one, eight)
    protocol = publish(tmp_path / "in-redis", redis_server.client(), 8, None)
    assert used_memory(redis_server) - eight > 8 * LARGE  # the default keeps them in Redis
    # A worker reads the registry's blobs through the bundle, verified.
    worker = BlobStore(redis_server.client(), tmp_path / "worker")
    loaded = bundles.load(redis_server.client(), worker, protocol)
    assert loaded.blobs is worker  # this one lives in Redis
    registry_protocol = publish(
        tmp_path / "again", redis_server.client(), 2, registry_server.address
    )
    remote = bundles.load(redis_server.client(), worker, registry_protocol)
    assert remote.blobs is not None and remote.blobs.location == f"http://{registry_server.address}"
    task = next(t for t in remote.tasks.values() if isinstance(t, RepoTask))
    members = bundles.RemoteInputs(remote.blobs).fixture(task)
    assert any(m.path == "noise.bin" for m in members)


def test_gc_returns_redis_to_its_size_and_drops_the_registrys_manifests(
    tmp_path: Path, redis_server: RedisServer, registry_server: RegistryServer
) -> None:
    client = redis_server.client()
    before = used_memory(redis_server)
    protocols = []
    for i in range(10):  # ten runs of different suites, half of them through the registry
        registry = registry_server.address if i % 2 else None
        protocols.append(publish(tmp_path / f"s{i}", client, 1, registry, tag=str(i)))
        blob_gc.note_run(client, f"run-s{i}", protocols[-1], "finished")
    live = publish(tmp_path / "live", client, 1, None, tag="live")  # still running
    assert used_memory(redis_server) > before + 5 * LARGE
    broker = f"redis://127.0.0.1:{redis_server.port}/0"
    dry = run_cli("gc", "--broker", broker, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert counted(r"would remove (\d+) blob", dry.stdout) >= 5  # a fixture each, at least
    assert "would drop 5 registry manifest(s)" in dry.stdout
    assert all(client.exists(keys.protocol(p)) for p in protocols)  # a dry run removes nothing
    done = run_cli("gc", "--broker", broker)
    assert done.returncode == 0, done.stderr
    assert counted(r"removed (\d+) blob", done.stdout) == counted(
        r"would remove (\d+) blob", dry.stdout
    )
    assert "dropped 5 registry manifest(s)" in done.stdout
    assert "kept the blobs of 1 live run(s): run-live" in done.stdout
    for protocol in protocols:
        assert not client.exists(keys.protocol(protocol))
    assert client.exists(keys.protocol(live))  # the live run keeps its bundle and blobs
    blob_gc.note_run(client, "run-live", live, "finished")
    assert run_cli("gc", "--broker", broker).returncode == 0
    assert used_memory(redis_server) < before + LARGE  # back to its size (allocator slack aside)
    # The registry's own garbage collector then frees the blobs no manifest keeps.
    store = registry_server.directory / "storage" / "docker" / "registry" / "v2" / "blobs"
    held = sum(p.stat().st_size for p in store.rglob("data"))
    assert held > 5 * LARGE
    collected = subprocess.run(
        ["docker-registry", "garbage-collect", "--delete-untagged",
         str(registry_server.directory / "config.yml")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert collected.returncode == 0, collected.stdout + collected.stderr
    assert sum(p.stat().st_size for p in store.rglob("data")) < LARGE


def test_an_interrupted_run_keeps_its_blobs_until_max_age(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    client = redis_server.client()
    protocol = publish(tmp_path / "s", client, 1, None)
    blob_gc.note_run(client, f"run-{(tmp_path / 's').name}", protocol, "interrupted")
    kept = blob_gc.collect(client, lambda registry, tag: True)
    assert kept.redis_blobs == 0 and client.exists(keys.protocol(protocol))
    later = blob_gc.collect(client, lambda registry, tag: True, max_age_s=0)
    assert later.redis_blobs >= 1 and not client.exists(keys.protocol(protocol))
    assert json.loads(client.get(keys.protocol_blobs(protocol)) or "null") is None


def test_gc_without_a_reachable_broker_is_one_line(tmp_path: Path) -> None:
    result = run_cli("gc", "--broker", "redis://127.0.0.1:9/0")
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert result.stderr.strip().count("\n") == 0


def test_a_run_past_the_warning_size_in_redis_is_told_to_use_a_registry(
    tmp_path: Path, redis_server: RedisServer, registry_server: RegistryServer
) -> None:
    from runner.distributed.coordinator import publish_inputs
    from runner.run.prepare import prepare

    controls = suite_of(tmp_path, 2)
    prepared = prepare(controls, tmp_path / "run", resume=False, image_digest=lambda i: "sha256:x")
    warned: list[str] = []
    publish_inputs(prepared, redis_server.client(), None, 6 << 20, warned.append)
    assert len(warned) == 1 and "MiB of archives in Redis memory" in warned[0]
    assert "--registry HOST:PORT" in warned[0]
    runs = redis_server.client().hgetall(keys.runs())
    assert json.loads(runs[prepared.meta.run_id.encode()])["state"] == "running"
    quiet: list[str] = []
    publish_inputs(prepared, redis_server.client(), None, 64 << 20, quiet.append)
    publish_inputs(prepared, redis_server.client(), registry_server.address, 1, quiet.append)
    assert quiet == []
