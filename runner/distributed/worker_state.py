"""What one worker process keeps between jobs: its name, Redis, the blob store, the
protocols and inputs it loaded, and its Docker sandboxes.

Made lazily, after Celery's prefork pool forked: a connection opened before the fork
would be shared by every pool process.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any

import redis

from runner.distributed import protocol_bundle as bundles
from runner.distributed.blobs import BlobStore
from runner.distributed.pacing_samples import TimedFactory, push

log = logging.getLogger("deltarun.worker")


def worker_name() -> str:
    return os.environ.get("DELTARUN_WORKER_NAME") or socket.gethostname()


@dataclass
class WorkerState:
    """Per-process state, created lazily after the pool forks."""

    broker_url: str
    job_key: bytes
    name: str = field(default_factory=worker_name)
    _redis: redis.Redis | None = None
    _blobs: BlobStore | None = None
    _inputs: dict[str, bundles.RemoteInputs] = field(default_factory=dict)
    _sandboxes: Any = None
    _protocols: dict[str, bundles.Protocol] = field(default_factory=dict)
    _last_reap: float = 0.0
    pace_node: str | None = None  # -c auto: the node whose pacer reads this process's samples

    @property
    def redis(self) -> redis.Redis:
        if self._redis is None:
            self._redis = redis.Redis.from_url(self.broker_url, socket_timeout=60)
        return self._redis

    @property
    def blobs(self) -> BlobStore:
        if self._blobs is None:
            self._blobs = BlobStore(self.redis)
        return self._blobs

    def inputs(self, protocol: bundles.Protocol) -> bundles.RemoteInputs:
        """One per protocol, sharing the process's git store and bounded member cache."""
        if protocol.sha256 not in self._inputs:
            shared = next(iter(self._inputs.values()), None)
            self._inputs[protocol.sha256] = bundles.RemoteInputs(
                protocol.blobs or self.blobs,
                protocol.git_blobs,
                protocol.controls.runtime.archive_caps,
                store=shared.store if shared else None,
                cache=shared.cache if shared else None,
            )
        return self._inputs[protocol.sha256]

    def sandboxes(self) -> Any:
        if self._sandboxes is None:
            from runner.sandbox.docker import DockerSandboxFactory
            from runner.sandbox.engine import connect

            factory = DockerSandboxFactory(connect(), worker=self.name)
            self._sandboxes = factory
            if self.pace_node is not None:  # each start's latency and failure, for the pacer
                self._sandboxes = TimedFactory(factory, self.record_pace)
        return self._sandboxes

    def record_pace(self, kind: str, seconds: float) -> None:
        """A sample for this worker's pacer (``-c auto``); nothing without pacing."""
        if self.pace_node is not None:
            push(self.redis, self.pace_node, kind, seconds)

    def protocol(self, sha256: str) -> bundles.Protocol:
        if sha256 not in self._protocols:
            self._protocols[sha256] = bundles.load(self.redis, self.blobs, sha256)
        return self._protocols[sha256]

    def reap_orphans(self) -> None:
        """Remove sandboxes of this worker whose process is gone (a killed pool child)."""
        now = time.monotonic()
        if now - self._last_reap < 60:
            return
        self._last_reap = now
        from runner.sandbox.reaper import reap_orphans

        for line in reap_orphans(self.sandboxes().client, self.name):
            log.info("reaper: %s", line)
