"""A worker's disk budget on its Docker engine and fixture cache (``--disk-budget SIZE``).

The choice of what to evict is pure (``runner.distributed.disk_budget``); this module
lists what the worker keeps, says which of it is needed, removes what was chosen and
publishes the worker's disk use for ``deltarun status``. It runs in the image watcher's
thread (``runner.distributed.served_images``), once a round.

What counts: the images this worker pulled itself (``record``: a file in its cache,
``pulled-images.json``, listing each image ID pulled and the references it made for it)
and the entries of its fixture cache. An image the worker did not pull (built on the
host, the deltarun/* base images, anything of the operator's) is never counted nor
touched. An image counts the bytes only it holds (Docker's size less the layers it
shares with other images), which is what evicting it frees.

What is needed, never evicted: an image a live run pins (``keys.run_images`` of every run
``keys.runs`` says is live, as ``deltarun gc --broker`` decides it: not finished and
noted within a week), an image a container uses, a cache entry read within the last
minute, one a live copy-free workspace mounts, and the blobs and git repositories of a
live run's protocol. A live run's images are also the only published images the worker
pulls (the others, when present, are served and may be evicted): it pulls them as soon
as the run publishes them, before it takes the run's first job.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker.errors
import redis

from runner.atomic import write_atomic
from runner.distributed import keys
from runner.distributed.blob_gc import MAX_AGE_S
from runner.distributed.disk_budget import CACHE, IMAGE, Choice, Item, choose, shown
from runner.sandbox.engine import API_ERRORS
from runner.trees.cache import RECENT_S, CacheDir, _overlay_lowers

log = logging.getLogger("deltarun.worker")

RECORD = "pulled-images.json"
REPORT_TTL_S = 120  # a worker's disk line outlives it by at most this much


def live_runs(client: redis.Redis, now: float, max_age_s: float = MAX_AGE_S) -> dict[str, str]:
    """Run id → protocol hash of every live run (not finished, noted within ``max_age_s``)."""
    found: dict[str, str] = {}
    raw: dict[bytes, bytes] = client.hgetall(keys.runs())  # type: ignore[assignment]
    for run_id, value in raw.items():
        try:
            entry = json.loads(value)
            name = run_id.decode() if isinstance(run_id, bytes) else str(run_id)
            if entry.get("state") != "finished" and now - float(entry.get("at", 0)) < max_age_s:
                found[name] = str(entry.get("protocol"))
        except (ValueError, TypeError, AttributeError, UnicodeDecodeError):
            continue
    return found


def live_pins(client: redis.Redis, runs: Iterable[str]) -> set[tuple[str, str]] | None:
    """(tag, image ID) of every image the ``runs`` pin; None when one of them lists none
    (a coordinator still publishing, or of a deltarun before the lists): then any image
    may be that run's."""
    pins: set[tuple[str, str]] = set()
    for run_id in runs:
        try:
            listed = json.loads(client.get(keys.run_images(run_id)) or b"null")
            pins.update((str(tag), str(pin)) for tag, pin in dict(listed).items())
        except (ValueError, TypeError):
            return None
    return pins


def live_cache_keys(client: redis.Redis, protocols: Iterable[str]) -> set[str]:
    """The cache keys (blobs and git repositories) of the blobs the ``protocols`` list."""
    needed: set[str] = set()
    for protocol in set(protocols):
        try:
            listing = json.loads(client.get(keys.protocol_blobs(protocol)) or b"{}")
            digests = [str(d) for d in dict(listing.get("blobs") or {})]
        except (ValueError, TypeError, AttributeError):
            continue
        needed.update(f"blobs/{d[:2]}/{d}" for d in digests)
        needed.update(f"git/{d}" for d in digests)
    return needed


@dataclass
class Keeper:
    """A worker's disk budget: ``refresh`` (what live runs need), ``may_pull``, ``pulled``
    (recorded), then each round ``plan``, ``evict`` and ``report``."""

    budget: int
    worker: str
    cache: CacheDir = field(default_factory=CacheDir)
    pins: set[tuple[str, str]] | None = field(default_factory=set)  # None: not known
    cache_needed: set[str] = field(default_factory=set)
    evicted: int = 0  # bytes evicted since the worker started
    warned: bool = False  # over the budget at the last round (said once until under)
    unknown: bool = False  # a live run lists no images: said once

    @property
    def record_path(self) -> Path:
        return self.cache.root / RECORD

    def refresh(self, client: redis.Redis, now: float) -> None:
        """Read what live runs need from Redis."""
        runs = live_runs(client, now)
        self.pins = live_pins(client, runs)
        self.cache_needed = live_cache_keys(client, runs.values())
        if self.pins is None and not self.unknown:
            log.warning(
                "disk budget: a live run lists no images (its coordinator still publishing, "
                "or an older deltarun): every published image may be pulled and no image is "
                "evicted until it does"
            )
        self.unknown = self.pins is None

    def may_pull(self, tag: str, image_id: str) -> bool:
        """Only a live run's images are pulled: a published image no live run pins would
        be evicted again at once. (Any published image while a live run lists none.)"""
        return self.pins is None or (tag, image_id) in self.pins

    def record(self) -> dict[str, dict[str, Any]]:
        """Image ID → {"refs": references this worker made, "used": epoch seconds}."""
        try:
            found = json.loads(self.record_path.read_bytes())
            return {str(k): dict(v) for k, v in dict(found).items()}
        except FileNotFoundError:
            return {}
        except (ValueError, TypeError, OSError) as exc:
            log.warning("disk budget: %s unreadable (%s); starting a new one", RECORD, exc)
            return {}

    def _write(self, record: dict[str, dict[str, Any]]) -> None:
        self.cache.root.mkdir(parents=True, exist_ok=True)
        write_atomic(self.record_path, json.dumps(record, sort_keys=True).encode())

    def pulled(self, image_id: str, refs: Iterable[str], now: float) -> None:
        """Note an image this worker pulled, with the references it made (the digest it
        pulled by, the tag it set): the only images it ever evicts."""
        record = self.record()
        entry = record.setdefault(image_id, {"refs": []})
        entry["refs"] = sorted({*entry.get("refs", []), *refs})
        entry["used"] = now
        self._write(record)

    def plan(self, api: Any, now: float) -> Choice:
        """What to evict now (``disk_budget.choose``); marks images in use as used now."""
        record = self.record()
        items, needed = self._images(api, record, now)
        mounted = _overlay_lowers()
        for entry in self.cache.entries():
            items.append(Item(CACHE, entry.key, entry.size, entry.used))
            if (
                entry.key in self.cache_needed
                or now - entry.used < RECENT_S
                or str(entry.path) in mounted
            ):
                needed.add((CACHE, entry.key))
        return choose(items, needed, self.budget)

    def _images(
        self, api: Any, record: dict[str, dict[str, Any]], now: float
    ) -> tuple[list[Item], set[tuple[str, str]]]:
        """The recorded images still present, as items, and the needed ones among them."""
        try:
            listed = {str(i.get("Id")): i for i in api.df().get("Images") or []}
        except API_ERRORS as exc:
            log.warning("disk budget: Docker did not list its images (%s)", exc)
            return [], set()
        pinned = {pin for _tag, pin in self.pins} if self.pins is not None else set(record)
        before = json.dumps(record, sort_keys=True)
        items: list[Item] = []
        needed: set[tuple[str, str]] = set()
        for image_id in sorted(record):
            info = listed.get(image_id)
            if info is None:
                record.pop(image_id)  # removed by someone else: no longer ours
                continue
            shared = int(info.get("SharedSize") or 0)
            size = max(0, int(info.get("Size") or 0) - max(0, shared))
            if int(info.get("Containers") or 0) > 0:
                record[image_id]["used"] = now
                needed.add((IMAGE, image_id))
            if image_id in pinned:
                needed.add((IMAGE, image_id))
            items.append(Item(IMAGE, image_id, size, float(record[image_id].get("used", 0))))
        if json.dumps(record, sort_keys=True) != before:
            self._write(record)
        return items, needed

    def evict(self, api: Any, choice: Choice, say: Callable[[str], None]) -> list[str]:
        """Remove what ``choice`` evicts; the image IDs removed (a tag that another image
        took since, or an image a container started using, is left alone)."""
        record = self.record()
        gone: list[str] = []
        for item in choice.evict:
            if item.kind == CACHE:
                _remove(self.cache.path(item.key))
            elif not _untag(api, item.key, record.get(item.key, {}).get("refs", [])):
                continue
            else:
                record.pop(item.key, None)
                gone.append(item.key)
            self.evicted += item.size
            say(f"disk budget: evicted {item.kind} {item.key[:19]} ({shown(item.size)})")
        self._write(record)
        return gone

    def report(self, client: redis.Redis, choice: Choice, now: float) -> dict[str, Any]:
        """Publish this worker's disk use (``keys.worker_disk``) for ``deltarun status``."""
        kept = set(choice.evict)
        images = [i for i in choice.items if i.kind == IMAGE and i not in kept]
        entry = {
            "budget": self.budget,
            "used": choice.after,
            "images": len(images),
            "image_bytes": sum(i.size for i in images),
            "cache_bytes": choice.after - sum(i.size for i in images),
            "over": choice.over,
            "evicted": self.evicted,
            "at": now,
        }
        client.set(keys.worker_disk(self.worker), json.dumps(entry), ex=REPORT_TTL_S)
        return entry

    def round(self, api: Any, say: Callable[[str], None]) -> Choice:
        """Plan against what live runs needed at the last ``refresh``; the caller stops
        serving the images chosen before ``evict`` removes them."""
        choice = self.plan(api, time.time())
        warned, self.warned = self.warned, choice.over > 0
        if choice.over and not warned:
            say(
                f"disk budget: {shown(choice.after)} kept, over the budget of "
                f"{shown(self.budget)} by {shown(choice.over)}: live runs need it"
            )
        return choice


def _untag(api: Any, image_id: str, refs: Iterable[str]) -> bool:
    """Remove the references this worker made for ``image_id`` (each only while it still
    names that image); True once none is left. A container using it makes Docker refuse."""
    for ref in refs:
        try:
            if str(api.inspect_image(ref)["Id"]) != image_id:
                continue  # the tag was taken by another image since: not ours any more
            api.remove_image(ref)
        except docker.errors.ImageNotFound:
            continue
        except docker.errors.APIError as exc:  # 409: a container uses it
            log.info("disk budget: kept %s (%s)", ref, exc.explanation or exc)
            return False
        except API_ERRORS as exc:
            log.warning("disk budget: could not remove %s (%s)", ref, exc)
            return False
    return True


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
