"""The sandbox images a worker serves: one Celery queue per image.

Without ``-Q`` a worker serves what runs publish in ``deltarun:images`` (tag → pinned
image ID and registry reference), pulling a missing image by digest and keeping it
only with the pinned ID, and the default sandbox image when present. Every image
passes the preflight before its queue is consumed. A thread of the main process
(``Watcher``) takes on images published later and starts consuming their queues.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis
from celery import Celery

from runner.distributed import keys, registry
from runner.distributed.disk_budget_keeper import Keeper
from runner.errors import DeltarunError, DigestMismatch

log = logging.getLogger("deltarun.worker")

IMAGE_POLL_S = float(os.environ.get("DELTARUN_IMAGE_POLL_S", "10"))


def default_image() -> str:
    """The sandbox image of controls that name none: served when present, without -Q."""
    from runner.config.runtime import Runtime

    return str(Runtime.model_fields["image"].default)


@dataclass
class ServedImages:
    """The images a worker serves, each present with the image ID the run pins and past the
    preflight. ``only`` is ``-Q`` (a filter; None serves whatever runs publish); ``pull``
    allows pulling a missing image by the digest a run published."""

    client: Any
    worker: str
    only: list[str] | None
    pull: bool
    say: Callable[[str], None]
    served: dict[str, str] = field(default_factory=dict)  # tag → image ID
    runtimes: tuple[str, ...] = ()  # the engine's OCI runtimes (``sandbox.engine.engine_runtimes``)
    consuming: set[str] = field(default_factory=set)  # Celery queues
    refused: dict[str, registry.Published] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)  # tag → last message logged
    keeper: Keeper | None = None  # --disk-budget: pulls only live runs' images, evicts

    def allowed(self, tag: str, entry: registry.Published | None) -> bool:
        """Whether to take on a published ``tag``: always without a disk budget; with one,
        when a live run pins it (pulled, before the run's first job) or it is here."""
        if self.keeper is None or entry is None or self.keeper.may_pull(tag, entry.id):
            return True
        return _present(self.client, entry.id)

    def start(self, published: dict[str, registry.Published]) -> None:
        """The images to serve from the start: an image ``-Q`` names must be usable (one
        line and exit otherwise); one merely published is logged and skipped when not."""
        if self.only is not None:
            for tag in self.only:
                self.admit(tag, published.get(tag))
            for tag in self.layers(published):  # pulled like any published image, never fatal
                if self.allowed(tag, published[tag]):
                    try:
                        self.admit(tag, published[tag])
                    except DeltarunError as exc:
                        self.note(tag, published[tag], exc, self.say)
            return
        tags = [tag for tag in sorted(published) if self.allowed(tag, published[tag])]
        default = default_image()
        if default not in published and _present(self.client, default):
            tags.append(default)
        for tag in tags:
            try:
                self.admit(tag, published.get(tag))
            except DeltarunError as exc:
                self.note(tag, published.get(tag), exc, self.say)

    def admit(self, tag: str, entry: registry.Published | None) -> None:
        """Make ``tag`` servable: present with the published pin (pulled by digest when
        missing and pulling is on), then the preflight with default limits."""
        from runner.sandbox.engine import image_id

        if entry is None:
            pinned = image_id(self.client, tag)  # a missing image: one line naming how to build
        else:
            ref = entry.ref if self.pull else None
            if registry.ensure(self.client, ref, entry.id, tag) == "pulled":
                self.say(f"pulled {tag} ({entry.id[:19]}) from {entry.ref}")
                if self.keeper is not None and entry.ref is not None:
                    self.keeper.pulled(entry.id, [entry.ref, tag], time.time())
            pinned = entry.id
        _preflight(self.client, self.worker, [tag])
        self.served[tag] = pinned
        self.refused.pop(tag, None)
        self.failures.pop(tag, None)

    def note(
        self,
        tag: str,
        entry: registry.Published | None,
        exc: DeltarunError,
        say: Callable[[str], None],
    ) -> None:
        """Log a failure once; a refused pin is not tried again until the run publishes
        another entry for the tag (a registry that is down is tried again each round)."""
        if isinstance(exc, DigestMismatch) and entry is not None:
            self.refused[tag] = entry
        line = f"not served: {exc}" if tag in str(exc) else f"not served: {tag}: {exc}"
        if self.failures.get(tag) != line:
            self.failures[tag] = line
            say(line)

    def changes(self, published: dict[str, registry.Published]) -> list[str]:
        """Tags published with a pin this worker does not serve yet (and may: ``-Q``, or an
        installed agent's layer on an image ``-Q`` names)."""
        layers = set(self.layers(published)) if self.only is not None else set()
        return [
            tag
            for tag, entry in sorted(published.items())
            if (self.only is None or tag in self.only or tag in layers)
            and self.served.get(tag) != entry.id
            and self.refused.get(tag) != entry
            and self.allowed(tag, entry)
        ]

    def layers(self, published: dict[str, registry.Published]) -> list[str]:
        """The published agent layers on the images ``-Q`` names: an installed agent's trial
        on a served image runs from one, so a worker with ``-Q`` pulls them too."""
        from runner.agents.installed.layer import is_layer_on

        bases = [published[tag].id for tag in self.only or () if tag in published]
        return [tag for tag in sorted(published) if any(is_layer_on(tag, b) for b in bases)]


@dataclass
class Watcher:
    """The background thread of a worker's main process: every ``poll_s`` it reads the
    images runs published, ensures the new ones and consumes their queues (Celery remote
    control to this very node, which works with the prefork pool: the main process
    consumes, the pool children only run tasks)."""

    app: Celery
    node: str
    images: ServedImages
    broker: str
    poll_s: float
    job_key: bytes
    stop: threading.Event = field(default_factory=threading.Event)

    def on_ready(self, sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", self.app) is self.app and not self.stop.is_set():
            threading.Thread(target=self.run, name="deltarun-images", daemon=True).start()

    def on_shutdown(self, **_: Any) -> None:
        self.stop.set()

    def run(self) -> None:
        from runner.sandbox.engine import connect

        client = redis.Redis.from_url(self.broker, socket_timeout=30)
        self.images.client = connect()  # this thread's own engine connection
        self.images.say = lambda line: log.info("%s", line)
        while not self.stop.wait(self.poll_s):
            try:
                if self.images.keeper is not None:
                    self.images.keeper.refresh(client, time.time())
                self.round(registry.published(client, self.job_key))
                if self.images.keeper is not None:
                    self.budget(client, self.images.keeper)
            except (redis.RedisError, OSError) as exc:
                log.warning("images: Redis unavailable (%s); trying again", exc)
            except Exception:  # the thread must outlive any one failure
                log.exception("images: unexpected failure; trying again")

    def round(self, published: dict[str, registry.Published]) -> None:
        """Ensure every newly published image, then consume (or stop consuming) queues."""
        for tag in self.images.changes(published):
            entry = published[tag]
            try:
                self.images.admit(tag, entry)
            except DeltarunError as exc:
                self.images.note(tag, entry, exc, lambda line: log.error("%s", line))
                self.images.served.pop(tag, None)  # pinned anew and unusable here: stop
        wanted = {
            queue: tag
            for tag in self.images.served
            for queue in keys.queues_for_image(tag, self.images.runtimes)
        }
        for queue in sorted(set(wanted) - self.images.consuming):
            if self._control(queue, add=True):
                log.info("images: now serving %s (queue %s)", wanted[queue], queue)
        for queue in sorted(self.images.consuming - set(wanted) - {keys.IDLE_QUEUE}):
            if self._control(queue, add=False):
                log.info("images: no longer serving queue %s", queue)

    def budget(self, client: redis.Redis, keeper: Keeper) -> None:
        """Keep the disk within the budget: the images chosen stop being served (their
        queues no longer consumed) before they are removed; then the use is published."""
        choice = keeper.round(self.images.client, lambda line: log.warning("%s", line))
        chosen = {item.key for item in choice.evict}
        if chosen:
            for tag in [t for t, pin in self.images.served.items() if pin in chosen]:
                self.images.served.pop(tag)
            self.round({})  # cancels the queues of images no longer served
            keeper.evict(self.images.client, choice, lambda line: log.info("%s", line))
        keeper.report(client, choice, time.time())

    def _control(self, queue: str, *, add: bool) -> bool:
        """Start (or stop) consuming ``queue`` on this node; True once the node confirmed."""
        control = self.app.control
        method = control.add_consumer if add else control.cancel_consumer
        try:
            replies = method(queue, destination=[self.node], reply=True, timeout=5) or []
        except Exception as exc:  # kombu/redis errors: tried again next round
            log.warning("images: %s %s failed (%s)", "adding" if add else "cancelling", queue, exc)
            return False
        confirmed = any(self.node in reply for reply in replies)
        if confirmed:
            (self.images.consuming.add if add else self.images.consuming.discard)(queue)
        return confirmed


def _present(client: Any, image: str) -> bool:
    from runner.sandbox.engine import API_ERRORS

    try:
        client.inspect_image(image)
    except API_ERRORS:
        return False
    return True


def _preflight(client: Any, worker: str, images: list[str]) -> None:
    """Every image present and usable with default limits, before any job is taken."""
    from runner.sandbox.base import Limits, SandboxSpec
    from runner.sandbox.docker import DockerSandboxFactory
    from runner.sandbox.engine import image_id

    factory = DockerSandboxFactory(client, worker=worker)
    limits = Limits(memory_bytes=1 << 30, nano_cpus=10**9, pids=256, workspace_bytes=512 << 20)
    for image in images:
        image_id(client, image)  # a missing image is one line before any job is taken
        factory.preflight(
            SandboxSpec(
                image=image,
                limits=limits,
                lifetime_s=60,
                labels={"run": "preflight", "job": "preflight"},
            )
        )
