"""``deltarun worker --disk-budget`` on a real Docker engine, a real registry on loopback
(``tests/test_registry.py``'s), real Redis and a real worker.

Every image here is this test's own: the sandbox image plus a layer of random bytes and a
unique label, pushed to the registry and removed by ID; the deltarun/* images other tests
use are only ever checked to be still there.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from runner.distributed import blob_gc, keys, registry
from runner.distributed.disk_budget import CACHE, IMAGE
from runner.distributed.disk_budget_keeper import RECORD, Keeper
from runner.trees.cache import CacheDir
from tests.conftest import run_cli
from tests.distributed_support import Proc, RedisServer, session_key, start_worker, wait_for
from tests.helpers import PY_IMAGE, make_suite, repo_task
from tests.test_registry import Images, RegistryServer, registry_server  # noqa: F401

pytestmark = pytest.mark.docker

MIB = 1 << 20


def _tag(name: str) -> str:
    return f"deltarun-test/disk-{name}-{uuid.uuid4().hex[:8]}:1"


def _build(images: Images, tag: str, pad: int) -> str:
    """The sandbox image plus ``pad`` random bytes in a layer of its own."""
    context = io.BytesIO()
    dockerfile = (
        f"FROM {PY_IMAGE}\nCOPY pad /deltarun-test-pad\n"
        f"LABEL deltarun.test.disk={uuid.uuid4().hex}\n"
    ).encode()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name, data in (("Dockerfile", dockerfile), ("pad", os.urandom(pad))):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    for _ in images.api.build(
        fileobj=context, custom_context=True, tag=tag, rm=True, forcerm=True, decode=True
    ):
        pass
    image_id = str(images.api.inspect_image(tag)["Id"])
    images.ids.add(image_id)
    return image_id


def _shipped(images: Images, server: RegistryServer, tag: str, pad: int) -> registry.Published:
    """Built, pushed, and removed here: only the registry has it."""
    image_id = _build(images, tag, pad)
    ref = registry.push(images.api, tag, image_id, server.address)
    images.remove(image_id)
    assert images.present(image_id) is None
    return registry.Published(image_id, ref)


def _cache_entry(cache: CacheDir, key: str, size: int, used: float) -> None:
    path = cache.path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(size))
    os.utime(path, (used, used))


def test_keeper_evicts_the_least_recently_used_unneeded_never_a_live_pin(
    tmp_path: Path,
    redis_server: RedisServer,
    registry_server: RegistryServer,  # noqa: F811
    docker_api: Any,
) -> None:
    made = Images(docker_api)
    try:
        _keeper_round_trip(tmp_path, redis_server, registry_server, made)
    finally:
        made.cleanup()


def _keeper_round_trip(
    tmp_path: Path, redis_server: RedisServer, server: RegistryServer, made: Images
) -> None:
    api = made.api
    client = redis_server.client()
    tags = {name: _tag(name) for name in ("pinned", "spare", "recent")}
    shipped = {name: _shipped(made, server, tag, 2 * MIB) for name, tag in tags.items()}
    live, done = "a" * 64, "b" * 64
    blob_gc.note_run(client, "run-live", live)
    blob_gc.note_run(client, "run-done", done, "finished")
    registry.publish(client, {tags["pinned"]: shipped["pinned"]}, session_key(), "run-live")
    others = {tags[n]: shipped[n] for n in ("spare", "recent")}
    registry.publish(client, others, session_key(), "run-done")
    digest = "c" * 64
    blob_gc.note_protocol(client, live, None, {digest: 1024})

    cache = CacheDir(tmp_path / "cache", max_bytes=1 << 40)
    keeper = Keeper(2 * MIB, "w-disk", cache)
    now = time.time()
    keeper.refresh(client, now)
    assert keeper.may_pull(tags["pinned"], shipped["pinned"].id)
    assert not keeper.may_pull(tags["spare"], shipped["spare"].id)  # its run finished
    assert not keeper.may_pull(tags["pinned"], shipped["spare"].id)  # not the pinned ID
    for age, name in ((400, "pinned"), (300, "spare"), (200, "recent")):  # pinned: the LRU
        entry = shipped[name]
        assert registry.ensure(api, entry.ref, entry.id, tags[name]) == "pulled"
        keeper.pulled(entry.id, [str(entry.ref), tags[name]], now - age)
    _cache_entry(cache, f"blobs/{digest[:2]}/{digest}", 1024, now - 3700)  # a live run's
    _cache_entry(cache, "blobs/dd/" + "d" * 64, 1024, now - 3600)  # nobody's
    _cache_entry(cache, "trees/fresh.tar", 1024, now)  # read a moment ago

    choice = keeper.plan(api, now)
    listed = {(i.kind, i.key): i for i in choice.items}
    assert {k for kind, k in listed if kind == IMAGE} == {e.id for e in shipped.values()}
    sizes = {name: listed[(IMAGE, e.id)].size for name, e in shipped.items()}
    assert all(2 * MIB <= size < 3 * MIB for size in sizes.values()), sizes  # its own layer
    # Just enough to fit once the unneeded cache entry and the spare image go.
    keeper.budget = choice.used - 1024 - sizes["spare"]
    choice = keeper.plan(api, now)
    assert [(i.kind, i.key) for i in choice.evict] == [
        (CACHE, "blobs/dd/" + "d" * 64),
        (IMAGE, shipped["spare"].id),
    ]
    said: list[str] = []
    assert keeper.evict(api, choice, said.append) == [shipped["spare"].id]
    assert made.present(shipped["spare"].id) is None and made.present(tags["spare"]) is None
    assert made.present(shipped["pinned"].id) and made.present(shipped["recent"].id)
    assert not cache.path("blobs/dd/" + "d" * 64).exists()
    assert cache.path(f"blobs/{digest[:2]}/{digest}").exists()
    assert len(said) == 2 and shipped["spare"].id[:19] in said[1]
    assert shipped["spare"].id not in json.loads((cache.root / RECORD).read_text())
    reported = keeper.report(client, choice, now)
    assert json.loads(client.get(keys.worker_disk("w-disk")) or b"{}") == reported
    assert reported["used"] == choice.after <= keeper.budget and reported["images"] == 2

    # A live run that lists no images (its coordinator still publishing, or an older
    # deltarun): any of them may be its own, so none goes, and any published may be pulled.
    blob_gc.note_run(client, "run-unlisted", "9" * 64)
    keeper.budget = 0
    keeper.refresh(client, time.time())
    assert keeper.may_pull(tags["spare"], shipped["spare"].id)
    unknown = keeper.plan(api, time.time())
    assert {i.kind for i in unknown.evict} <= {CACHE} and unknown.over >= 4 * MIB
    client.hdel(keys.runs(), "run-unlisted")
    keeper.refresh(client, time.time())
    assert not keeper.may_pull(tags["spare"], shipped["spare"].id)

    # Nothing fits a budget of 0: a container of the recent image keeps it too.
    container = api.create_container(tags["recent"], command=["true"])["Id"]
    try:
        held = keeper.plan(api, time.time())
        assert held.evict == () and held.over == held.used
    finally:
        api.remove_container(container, force=True)
    last = keeper.plan(api, time.time())
    assert [i.key for i in last.evict] == [shipped["recent"].id]
    keeper.evict(api, last, said.append)
    assert made.present(tags["recent"]) is None
    assert made.present(tags["pinned"]) == shipped["pinned"].id  # a live run pins it
    assert made.present(PY_IMAGE) is not None  # never pulled by the worker: never counted

    # Its run finished: its image and blobs may go. A tag re-pointed since (another image
    # built under it) is not the worker's to remove; the reference it pulled by is.
    rebuilt = _build(made, tags["pinned"], 1024)
    blob_gc.note_run(client, "run-live", live, "finished")
    keeper.refresh(client, time.time())
    gone = keeper.plan(api, time.time())
    assert [i.key for i in gone.evict] == [f"blobs/{digest[:2]}/{digest}", shipped["pinned"].id]
    keeper.evict(api, gone, said.append)
    assert made.present(tags["pinned"]) == rebuilt
    assert made.present(str(shipped["pinned"].ref)) is None


def _queues(broker: str) -> set[str]:
    from runner.distributed.celery_app import make_app

    seen = make_app(broker).control.inspect(timeout=1.0).active_queues() or {}
    return {q["name"] for queues in seen.values() for q in queues or []}


def _disk(client: Any, worker: str) -> dict[str, Any]:
    return dict(json.loads(client.get(keys.worker_disk(worker)) or b"{}"))


def test_worker_prewarms_live_runs_images_and_evicts_a_finished_runs(
    tmp_path: Path,
    redis_server: RedisServer,
    registry_server: RegistryServer,  # noqa: F811
    docker_api: Any,
) -> None:
    """A worker with a budget below what two live runs pin pulls both before it takes a job
    (and says it is over), runs the trial, then evicts the finished run's image (its queue
    no longer consumed) and keeps the other live run's, the least recently used one;
    `deltarun status` shows its disk use."""
    made = Images(docker_api)
    procs: list[Proc] = []
    client = redis_server.client()
    try:
        keep_tag, run_tag, forged_tag = _tag("keep"), _tag("run"), _tag("forged")
        keep = _shipped(made, registry_server, keep_tag, 2 * MIB)
        blob_gc.note_run(client, "run-keep", "e" * 64)  # another live run, as one publishes
        registry.publish(client, {keep_tag: keep}, session_key(), "run-keep")
        # Written without the job key: an unsigned entry a live run "pins" is never pulled.
        client.hset(keys.images(), forged_tag, json.dumps({"id": keep.id, "ref": keep.ref}))
        client.set(keys.run_images("run-forged"), json.dumps({forged_tag: keep.id}))
        blob_gc.note_run(client, "run-forged", "f" * 64)

        run_id = _build(made, run_tag, 3 * MIB)
        controls = make_suite(
            tmp_path,
            [{**repo_task("t0"), "image": run_tag}],
            [{"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}}],
        )
        out = tmp_path / "run"
        args = ["run", str(controls), "--out", str(out), "--broker", redis_server.url]
        coordinator = Proc([*args, "--registry", registry_server.address], tmp_path / "c.log")
        procs.append(coordinator)
        wait_for(lambda: registry.published(client, session_key()).get(run_tag), 120, "the publish")
        made.remove(run_id)  # the worker to come lacks it

        worker = start_worker(
            redis_server,
            tmp_path / "w.log",
            "--disk-budget",
            "4m",
            name="wdisk",
            # A cache of its own: a budget evicts entries the session's other tests use.
            env={"DELTARUN_IMAGE_POLL_S": "1", "DELTARUN_CACHE": str(tmp_path / "wcache")},
        )
        procs.append(worker)
        assert coordinator.wait(timeout=240) == 0, coordinator.text()
        text = worker.text()
        pulls = [text.index(f"pulled {tag} (") for tag in (keep_tag, run_tag)]
        trial = text.index("trial ")
        assert max(pulls) < trial, text  # pulled before the run's first job was taken
        assert "disk budget 4.0 MiB" in text and "over the budget of 4.0 MiB" in text, text
        assert made.present(forged_tag) is None

        wait_for(lambda: made.present(run_tag) is None, 60, "the finished run's image to go")
        assert made.present(keep_tag) == keep.id  # the least recently used, but pinned live
        assert made.present(PY_IMAGE) is not None
        assert keys.queue_for_image(run_tag) not in _queues(redis_server.url)
        assert keys.queue_for_image(keep_tag) in _queues(redis_server.url)
        disk = wait_for(
            lambda: (d := _disk(client, "wdisk")).get("images") == 1 and d, 30, "the report"
        )
        assert disk["budget"] == 4 * MIB and disk["used"] <= 4 * MIB and disk["over"] == 0
        seen = run_cli("status", str(out), "--broker", redis_server.url)
        assert seen.returncode == 0, seen.stderr
        line = next(ln for ln in seen.stdout.splitlines() if "@wdisk (" in ln)
        assert "disk " in line and " of 4.0 MiB (1 image(s) " in line, seen.stdout
    finally:
        for proc in procs:
            proc.stop()
        made.cleanup()
