"""The blobs' lifecycle: which runs need which protocol's blobs, and removing the rest.

A coordinator notes its run in Redis (``keys.runs``: the protocol, a state and a
time it refreshes while it runs) before it publishes anything, and each published
protocol lists its blobs and where they live (``keys.protocol_blobs``). A run is
*live* while it is not ``finished`` and its time is younger than ``max_age_s``:
a run Ctrl-C'd or whose coordinator died keeps its blobs that long, since its
queued jobs may still be taken by workers and ``--resume`` is expected.

``collect`` (``deltarun gc --broker``) removes every protocol no live run needs:
its blobs in Redis (unless a live protocol shares them), or its manifest in the
registry (whose own ``garbage-collect`` then reclaims the bytes), its bundle and
its listing; then the Redis blobs no protocol lists (left by runs from before the
listing existed), unless a live run is still publishing; and the keys of every run no
longer live (``keys.run_keys``: a finished run's coordinator removed its own, a killed
run's expire a week after its last write anyway). Every run start publishes its protocol
again, so a resumed run never lacks what gc removed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import redis

from runner.distributed import keys

MAX_AGE_S = 7 * 24 * 3600  # as long as a stopped run stays stopped (keys.STOP_TTL_S)


def note_run(client: redis.Redis, run_id: str, protocol: str, state: str = "running") -> None:
    """Record (or refresh) a run's state; called at its start, while it runs and at its end."""
    entry = {"protocol": protocol, "state": state, "at": time.time()}
    client.hset(keys.runs(), run_id, json.dumps(entry))


def note_protocol(
    client: redis.Redis, protocol: str, registry: str | None, sizes: Mapping[str, int]
) -> None:
    """List a protocol's blobs and where they live."""
    entry = {"registry": registry, "blobs": dict(sorted(sizes.items()))}
    client.set(keys.protocol_blobs(protocol), json.dumps(entry))


@dataclass
class Collected:
    """What ``collect`` removed (or would remove, in a dry run)."""

    protocols: list[str] = field(default_factory=list)
    redis_blobs: int = 0
    redis_bytes: int = 0
    manifests: list[str] = field(default_factory=list)  # registry: tag
    kept: list[str] = field(default_factory=list)  # live runs
    orphans_skipped: bool = False

    def lines(self, dry_run: bool) -> list[str]:
        verb = "would remove" if dry_run else "removed"
        out = [
            f"{verb} {self.redis_blobs} blob(s) ({self.redis_bytes:,} bytes) from Redis and "
            f"{len(self.protocols)} protocol bundle(s)"
        ]
        if self.manifests:
            out.append(
                f"{'would drop' if dry_run else 'dropped'} {len(self.manifests)} registry "
                "manifest(s); the registry's `garbage-collect` reclaims their blobs' bytes"
            )
        if self.kept:
            out.append(f"kept the blobs of {len(self.kept)} live run(s): {', '.join(self.kept)}")
        if self.orphans_skipped:
            out.append("blobs no protocol lists kept: a live run is still publishing its own")
        return out


def _runs(client: redis.Redis) -> dict[str, dict[str, Any]]:
    found = {}
    for run_id, raw in client.hgetall(keys.runs()).items():
        try:
            name = run_id.decode() if isinstance(run_id, bytes) else str(run_id)
            found[name] = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            continue
    return found


def _listing(client: redis.Redis, protocol: str) -> dict[str, Any] | None:
    raw = client.get(keys.protocol_blobs(protocol))
    try:
        return None if raw is None else dict(json.loads(raw))
    except (ValueError, TypeError):
        return None


def collect(
    client: redis.Redis,
    drop_manifest: Callable[[str, str], bool],
    *,
    now: float | None = None,
    max_age_s: float = MAX_AGE_S,
    dry_run: bool = False,
) -> Collected:
    """Remove what no live run needs; ``drop_manifest(registry, tag)`` deletes one
    registry manifest (``RegistryBlobs.drop``)."""
    now = time.time() if now is None else now
    runs = _runs(client)
    live = {
        run_id: entry
        for run_id, entry in runs.items()
        if entry.get("state") != "finished" and now - float(entry.get("at", 0)) < max_age_s
    }
    needed = {str(entry.get("protocol")) for entry in live.values()}
    listed = {
        key.decode().rsplit(":", 1)[1]
        for key in client.scan_iter(match=keys.protocol_blobs("*"), count=1000)
    }
    listings = {p: _listing(client, p) or {} for p in listed}
    keep_blobs = {d for p in needed for d in listings.get(p, {}).get("blobs", {})}
    done = Collected(kept=sorted(live))
    removed: set[str] = set()
    for protocol in sorted(listed - needed):
        listing = listings[protocol]
        registry = listing.get("registry")
        blobs: dict[str, int] = listing.get("blobs", {})
        if registry:
            done.manifests.append(f"{registry}: protocol-{protocol}")
            if not dry_run:
                drop_manifest(str(registry), f"protocol-{protocol}")
        else:
            for digest, size in blobs.items():
                if digest in keep_blobs or digest in removed:
                    continue
                if client.exists(keys.blob(digest)):
                    removed.add(digest)
                    done.redis_blobs += 1
                    done.redis_bytes += int(size)
                    if not dry_run:
                        client.delete(keys.blob(digest))
        done.protocols.append(protocol)
        if not dry_run:
            client.delete(keys.protocol(protocol), keys.protocol_blobs(protocol))
    _orphans(client, done, needed - listed, keep_blobs | removed, dry_run)
    if not dry_run:
        stale = [run_id for run_id in runs if run_id not in live]
        if stale:  # with what runs that never finished left (records, done and started)
            client.delete(*[key for run_id in stale for key in keys.run_keys(run_id)])
            client.hdel(keys.runs(), *stale)
    return done


def _orphans(
    client: redis.Redis, done: Collected, publishing: set[str], keep: set[str], dry_run: bool
) -> None:
    """Redis blobs no protocol lists: removed, unless a live run has not listed its own."""
    if publishing:
        done.orphans_skipped = True
        return
    for key in client.scan_iter(match=keys.blob("*"), count=1000):
        digest = key.decode().rsplit(":", 1)[1]
        if digest in keep:
            continue
        done.redis_blobs += 1
        done.redis_bytes += int(client.strlen(key))
        if not dry_run:
            client.delete(key)
