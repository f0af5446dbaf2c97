"""The protocol bundle: what a worker needs to run any job of one protocol.

Published by the coordinator under ``deltarun:protocol:<hash>``; every part is
checked on the worker against the chain of digests the protocol hash pins:
protocol hash → controls (+ agent-directory digests) → suite digest → task
lines → archive digests. A worker therefore runs exactly what the coordinator
sealed, or refuses.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from pydantic import ValidationError

from runner import __version__, telemetry
from runner.agents.factory import agents_for, arm_members
from runner.agents.interface import Agent
from runner.config.controls import Controls
from runner.config.loader import LoadedControls, protocol_hash
from runner.distributed import blob_gc, keys
from runner.distributed.blobs import BlobStore
from runner.distributed.registry_blobs import worker_url
from runner.errors import DigestMismatch, ProtocolMismatch
from runner.grading.metric_modules import load_metrics, read_module
from runner.grading.metrics import Metric
from runner.records import GitRepo, RepoTask, Task
from runner.suite.load import Suite, parse_task_line
from runner.trees.archives import (
    DEFAULT_CAPS,
    ArchiveCaps,
    Member,
    build_tar,
    read_members,
    tree_digest,
)
from runner.trees.cache import CacheDir
from runner.trees.gitfixture import GitStore
from runner.trees.inputs import MEMORY_BUDGET, MemberCache, tree_members


class UnknownProtocol(ProtocolMismatch):
    """A job names a protocol hash that Redis holds no bundle for."""


class UnreadableBundle(ProtocolMismatch):
    """The bundle was written by another deltarun than this worker's: waiting does not
    change that, so the job is refused (a notice to its coordinator), not retried."""


@dataclass(frozen=True)
class Bundle:
    protocol_sha256: str
    controls: dict[str, Any]
    agent_dir_digests: dict[str, str]
    suite_blob: str
    agent_blobs: dict[str, str]
    deltarun_version: str = __version__
    metrics_blob: str | None = None
    # repo.git of the suite's git fixtures → blob of a bundle holding their commits: the
    # pinned bundle itself, or one made from a bare repository (its trees are pinned).
    git_blobs: dict[str, str] = field(default_factory=dict)
    # HOST:PORT of the registry holding the blobs (``registry_blobs``); None: Redis.
    blob_registry: str | None = None

    def to_json(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True)


def publish(loaded: LoadedControls, suite: Suite, blobs: BlobStore) -> Bundle:
    """Upload the suite, its archives and the agent directories (to Redis, or to the
    registry of ``blobs``); store the bundle and the list of its blobs (``blob_gc``)."""
    suite_blob = blobs.upload_file(suite.path, expected=suite.sha256)
    git_blobs: dict[str, str] = {}
    for task in suite.tasks:
        if isinstance(task, RepoTask):
            if isinstance(task.repo, GitRepo):
                if task.repo.git not in git_blobs:
                    git_blobs[task.repo.git] = _publish_git(suite, task, blobs)
            else:
                blobs.upload_file(suite.archive_path(task.repo), expected=task.repo_sha256)
            if task.hidden is not None:
                blobs.upload_file(suite.archive_path(task.hidden), expected=task.hidden_sha256)
    agent_blobs: dict[str, str] = {}
    for arm in loaded.controls.arms:
        members = arm_members(arm, loaded.base, loaded.root)
        if members is not None:
            agent_blobs[arm.name] = blobs.upload(build_tar(members, uid=0, gid=0))
    source, _origin = read_module(loaded.metrics_path)
    bundle = Bundle(
        metrics_blob=blobs.upload(source) if source is not None else None,
        protocol_sha256=loaded.protocol_sha256,
        controls=loaded.controls.model_dump(mode="json", by_alias=True),
        agent_dir_digests=dict(sorted(loaded.agent_dir_digests.items())),
        suite_blob=suite_blob,
        agent_blobs=agent_blobs,
        git_blobs=git_blobs,
        blob_registry=blobs.location,
    )
    if blobs.registry is not None:  # the registry keeps them while this manifest exists
        blobs.registry.keep(f"protocol-{bundle.protocol_sha256}", blobs.sizes)
    blob_gc.note_protocol(blobs.client, bundle.protocol_sha256, blobs.location, blobs.sizes)
    blobs.client.set(keys.protocol(bundle.protocol_sha256), bundle.to_json())
    return bundle


def _publish_git(suite: Suite, task: RepoTask, blobs: BlobStore) -> str:
    """Upload a git fixture's bundle once (a bare repository is bundled first)."""
    assert isinstance(task.repo, GitRepo)
    source = suite.archive_path(task.repo.git)
    if task.repo_sha256:
        return blobs.upload_file(source, expected=task.repo_sha256)
    store = GitStore(CacheDir())
    repo = store.repository(source)
    with tempfile.TemporaryDirectory(prefix="deltarun-bundle-") as tmp:
        out = Path(tmp) / "repo.bundle"
        commits = sorted(
            {
                t.repo.commit
                for t in suite.tasks
                if isinstance(t, RepoTask)
                and isinstance(t.repo, GitRepo)
                and t.repo.git == task.repo.git
            }
        )
        store.bundle_of(repo, commits, out)
        return blobs.upload_file(out)


class RemoteInputs:
    """``TrialInputs`` from the blob store; hidden archives are fetched only when verifying.
    A git fixture's bundle travels once and is kept as a repository in the worker's cache."""

    def __init__(
        self,
        blobs: BlobStore,
        git_blobs: Mapping[str, str] | None = None,
        caps: ArchiveCaps = DEFAULT_CAPS,
        store: GitStore | None = None,
        cache: MemberCache | None = None,
    ) -> None:
        self.blobs = blobs
        self.git_blobs = dict(git_blobs or {})
        self.caps = caps
        self.store = store or GitStore(CacheDir(blobs.cache_dir.parent))
        self.cache = cache or MemberCache(MEMORY_BUDGET)

    def _members(self, digest: str) -> list[Member]:
        return self._cached(digest, lambda: read_members(self.blobs.path(digest), self.caps))

    def _cached(self, key: str, load: Callable[[], list[Member]]) -> list[Member]:
        """From the member cache; ``load`` is called on a miss (counted by ``telemetry``)."""
        missed = False

        def miss() -> list[Member]:
            nonlocal missed
            missed = True
            return load()

        members = self.cache.get(key, miss)
        telemetry.cache_lookup("members", hit=not missed)
        return members

    def fixture(self, task: RepoTask) -> list[Member]:
        if isinstance(task.repo, GitRepo):
            return self._cached(f"tree:{task.repo_tree}", lambda: self._tree(task))
        return self._members(task.repo_sha256)

    def _tree(self, task: RepoTask) -> list[Member]:
        assert isinstance(task.repo, GitRepo)
        digest = self.git_blobs.get(task.repo.git) or task.repo_sha256
        if not digest:
            raise ProtocolMismatch(f"task {task.id!r}: the bundle names no blob for its repository")
        repo = self.store.repository_from_blob(digest, lambda: self.blobs.path(digest))
        return tree_members(self.store, repo, task, self.caps)

    def hidden(self, task: RepoTask) -> list[Member]:
        return self._members(task.hidden_sha256) if task.hidden is not None else []


@dataclass(frozen=True)
class Protocol:
    """A verified protocol on a worker: controls, tasks by id and agents by arm."""

    sha256: str
    controls: Controls
    tasks: dict[str, Task]
    agents: dict[str, Agent]
    metrics: Mapping[str, Metric]
    git_blobs: dict[str, str] = field(default_factory=dict)
    blobs: BlobStore | None = None  # where its blobs are read from (Redis or the registry)


def _readable(raw: bytes | str, protocol_sha256: str) -> tuple[Bundle, Controls]:
    """The bundle and its controls, when this deltarun can read them (``UnreadableBundle``)."""
    try:
        bundle = Bundle(**json.loads(raw))
    except (TypeError, ValueError) as exc:
        raise UnreadableBundle(
            f"deltarun {__version__} cannot read the bundle of protocol "
            f"{protocol_sha256[:12]} ({str(exc)[:200]})"
        ) from exc
    if bundle.deltarun_version != __version__:
        raise UnreadableBundle(
            f"protocol {protocol_sha256[:12]} was published by deltarun "
            f"{str(bundle.deltarun_version)[:40]}, this worker runs {__version__}"
        )
    try:
        controls = Controls.model_validate(bundle.controls)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "controls"
        raise UnreadableBundle(
            f"deltarun {__version__} cannot read the controls of protocol "
            f"{protocol_sha256[:12]} ({where[:120]}: {first['msg'][:120]})"
        ) from exc
    return bundle, controls


def load(client: redis.Redis, blobs: BlobStore, protocol_sha256: str) -> Protocol:
    """Fetch and verify the bundle of a protocol hash."""
    raw = client.get(keys.protocol(protocol_sha256))
    if raw is None:
        raise UnknownProtocol(
            f"protocol {protocol_sha256[:12]} is unknown to this Redis; its coordinator "
            "publishes it: re-run `deltarun run --resume` for that run"
        )
    bundle, controls = _readable(raw, protocol_sha256)
    if protocol_hash(controls, bundle.agent_dir_digests) != protocol_sha256:
        raise ProtocolMismatch(f"protocol {protocol_sha256[:12]}: bundle does not hash to its key")
    if bundle.blob_registry:
        blobs = blobs.at(worker_url(bundle.blob_registry))
    suite_bytes = blobs.read(bundle.suite_blob)
    if controls.suite.sha256 and bundle.suite_blob != controls.suite.sha256:
        raise DigestMismatch(
            f"protocol {protocol_sha256[:12]}: suite blob {bundle.suite_blob[:12]} is not the "
            f"pinned suite {controls.suite.sha256[:12]}"
        )
    tasks: dict[str, Task] = {}
    for number, line in enumerate(suite_bytes.decode("utf-8").splitlines(), start=1):
        if line.strip():
            task = parse_task_line(line, f"suite {bundle.suite_blob[:12]}:{number}")
            tasks[task.id] = task
    agents: dict[str, Agent] = {}
    arm_members: dict[str, list[Member] | None] = {}
    for arm in controls.arms:
        members: list[Member] | None = None
        if arm.name in bundle.agent_blobs:
            members = read_members(blobs.path(bundle.agent_blobs[arm.name]))
            if tree_digest(members) != bundle.agent_dir_digests.get(arm.name):
                raise DigestMismatch(
                    f"protocol {protocol_sha256[:12]}: agent directory of arm {arm.name!r} "
                    "does not match its pinned digest"
                )
        arm_members[arm.name] = members
    agents = agents_for(controls, arm_members)
    source = blobs.read(bundle.metrics_blob) if bundle.metrics_blob else None
    metrics = load_metrics(controls.metrics, source, f"metrics module of {protocol_sha256[:12]}")
    return Protocol(
        protocol_sha256, controls, tasks, agents, metrics, dict(bundle.git_blobs), blobs
    )
