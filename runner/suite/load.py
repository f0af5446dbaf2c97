"""A suite: ``tasks.jsonl`` plus the archives it names, each pinned by SHA-256.

``seal`` checks every line and every archive and writes the digests into the
lines; the digest of ``tasks.jsonl`` then pins everything. ``verify`` re-checks
every digest before the first sandbox starts and raises ``DigestMismatch``
(exit 3) naming the file and both digests.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from runner.atomic import write_atomic
from runner.bounded_input import TASKS_MAX_BYTES, sha256_capped
from runner.config.loader import format_validation_error
from runner.errors import ArchiveError, DigestMismatch, UserError
from runner.hashing import sha256_bytes
from runner.paths import closed_folder, inside, writable
from runner.records import AnswerTask, GitRepo, RepoTask, Task
from runner.suite import authoring_checks as task_checks
from runner.suite.environments import check_contexts
from runner.suite.lines import parse_json_line, task_lines
from runner.trees.archives import (
    DEFAULT_CAPS,
    ArchiveCaps,
    Member,
    archive_file_cap,
    build_tar,
    read_members,
)
from runner.trees.cache import CacheDir
from runner.trees.gitfixture import GitStore, TreeEntry, blob_id, check_entries, is_bundle

_TASK = TypeAdapter(RepoTask | AnswerTask)


@dataclass(frozen=True)
class Suite:
    """A loaded suite: its tasks in file order and the digest of tasks.jsonl."""

    path: Path
    sha256: str
    tasks: tuple[Task, ...]
    # Per repository task with hidden files: those its fixture also holds, byte for byte at
    # the same path (found while the archives are checked; see ``hidden_in_fixture``).
    exposed: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def root(self) -> Path:
        return self.path.parent

    def task(self, task_id: str) -> Task:
        for task in self.tasks:
            if task.id == task_id:
                return task
        raise KeyError(task_id)

    def archive_path(self, relative: str) -> Path:
        """The real path of an archive a task line names, held inside the suite."""
        return inside(self.root, relative, file=self.path, field="archive")


def parse_task_line(line: str, source: str) -> Task:
    """Parse one task line; errors name ``file:line`` and the field."""
    return task_of(parse_json_line(line, source), source)


def task_of(data: Any, source: str) -> Task:
    """The task of a task line's JSON value (bounded: ``runner.suite.lines``)."""
    if not isinstance(data, dict):
        raise UserError(f"{source}: a task line must be a JSON object")
    if "repo" in data and "expect" in data:
        raise UserError(f"{source}: a task has either 'repo' or 'expect', not both")
    model: type[RepoTask] | type[AnswerTask] = RepoTask if "expect" not in data else AnswerTask
    if "repo" not in data and "expect" not in data:
        raise UserError(
            f"{source}: a task needs 'repo' (repository task) or 'expect' (answer task)"
        )
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise UserError(format_validation_error(source, exc, model, "task")) from exc


def read_tasks(path: Path) -> list[Task]:
    """Read and validate every line of ``tasks.jsonl``."""
    tasks: list[Task] = []
    seen: set[str] = set()
    for line in task_lines(path):
        number = line.number
        task = task_of(line.data, f"{path}:{number}")
        if task.id in seen:
            raise UserError(f"{path}:{number}: id: {task.id!r} appears twice; ids must be unique")
        seen.add(task.id)
        tasks.append(task)
    if not tasks:
        raise UserError(f"{path}: no tasks; add one JSON object per line")
    return tasks


BUNDLE_MAX_BYTES = 8 << 30
"""The largest git bundle a suite may ship (hashed whole, then fetched by git)."""


def archive_sha256(archive: Path, caps: ArchiveCaps) -> str:
    """The SHA-256 of a tar fixture or hidden archive: a regular file within the size its
    caps allow (``archive_file_cap``), hashed before it is read."""
    return sha256_capped(archive, archive_file_cap(caps), "an archive", ArchiveError)


def _archive_files(task: Task) -> list[tuple[str, str, str]]:
    """(field, relative path, pinned digest) of each tar archive a task names."""
    if not isinstance(task, RepoTask):
        return []
    files = [] if isinstance(task.repo, GitRepo) else [("repo", task.repo, task.repo_sha256)]
    if task.hidden is not None:
        files.append(("hidden", task.hidden, task.hidden_sha256))
    return files


# Files in a git directory that make git read another folder: a suite's bare repository
# (or a folder holding ``.git``) may hold none of them.
GIT_POINTERS = (
    "objects/info/alternates",
    "objects/info/http-alternates",
    "commondir",
    ".git/objects/info/alternates",
    ".git/objects/info/http-alternates",
    ".git/commondir",
)


@dataclass(frozen=True)
class GitFacts:
    """What sealing found for a git fixture: its pins and its tree's entries."""

    tree: str
    bundle_sha256: str  # empty for a bare repository directory
    entries: tuple[TreeEntry, ...]


class GitChecks:
    """Resolve and check git fixtures, each source hashed once and each (source, commit)
    listed once: a thousand tasks over one bundle cost one hash and one tree listing."""

    def __init__(self, root: Path, caps: ArchiveCaps) -> None:
        self.root = root
        self.caps = caps
        self.store = GitStore(CacheDir())
        self._digests: dict[Path, str] = {}
        self._facts: dict[tuple[Path, str], GitFacts] = {}
        self._closed: set[Path] = set()  # repository directories checked by ``closed_folder``

    def path(self, task: RepoTask, source: str) -> Path:
        """The real path of a git fixture's source, held inside the suite; a repository
        directory is checked once to hold nothing that leads out (``closed_folder``)."""
        assert isinstance(task.repo, GitRepo)
        path = inside(self.root, task.repo.git, file=source, field="repo.git")
        if path.is_dir() and path not in self._closed:
            closed_folder(path, GIT_POINTERS, file=source, field="repo.git")
            self._closed.add(path)
        return path

    def bundle_sha256(self, path: Path) -> str:
        """The SHA-256 of a bundle file; empty for a bare repository directory."""
        if path not in self._digests:
            bundle = is_bundle(path)
            self._digests[path] = (
                sha256_capped(path, BUNDLE_MAX_BYTES, "a git bundle") if bundle else ""
            )
        return self._digests[path]

    def facts(self, task: RepoTask, source: str) -> GitFacts:
        """The commit's tree, checked like tar members. Pins are not compared here
        (``seal`` writes them, ``load_suite`` checks them)."""
        assert isinstance(task.repo, GitRepo)
        path = self.path(task, source)
        key = (path, task.repo.commit)
        if key not in self._facts:
            where = f"{source}: task {task.id!r}: repo.git {task.repo.git!r}"
            if not path.exists():
                raise UserError(f"{where}: not found; restore the bundle or fix repo.git")
            bundle_sha256 = self.bundle_sha256(path)
            repo = self.store.repository(path, bundle_sha256)
            tree = self.store.tree_of(repo, task.repo.commit, where)
            entries = tuple(self.store.entries(repo, tree, self.caps.max_members))
            check_entries(entries, self.caps, f"{path} at {task.repo.commit[:12]}")
            self._facts[key] = GitFacts(tree, bundle_sha256, entries)
        return self._facts[key]


def seal(
    tasks_path: Path,
    caps: ArchiveCaps = DEFAULT_CAPS,
    warn: Callable[[str], None] = lambda _line: None,
    strip_top_folder: bool = False,
) -> str:
    """Check every task and archive, write their digests into the lines, return the suite digest.

    A line whose digests are already right is kept byte for byte; a line that
    changes is rewritten as canonical JSON with only its digests changed. The
    file is replaced atomically, so an interrupted seal leaves the old file.
    Authoring mistakes (``runner.suite.authoring_checks``) are errors naming the line, before
    anything is written; a fixture under one top-level folder is a warning, or with
    ``strip_top_folder`` a tar fixture is rewritten without that folder.
    """
    writable(tasks_path.parent, tasks_path.name, what="deltarun seal writes the digests")
    tasks = read_tasks(tasks_path)
    check_contexts(tasks_path, tasks)
    lines: list[str] = []
    checks = GitChecks(tasks_path.parent, caps)
    read = task_lines(tasks_path)
    for number, (task, found) in enumerate(zip(tasks, read, strict=True), start=1):
        line, data = found.text, found.data
        changed = False
        paths: dict[str, set[str]] = {"repo": set(), "hidden": set()}
        if isinstance(task, RepoTask) and isinstance(task.repo, GitRepo):
            facts = checks.facts(task, f"{tasks_path}:{number}")
            paths["repo"] = {entry.path for entry in facts.entries}
            pins = {"repo_tree": facts.tree, "repo_sha256": facts.bundle_sha256}
            for key, value in pins.items():
                if data.get(key, "") != value:
                    data[key] = value
                    changed = True
        for name, relative, pinned in _archive_files(task):
            archive = inside(tasks_path.parent, relative, file=f"{tasks_path}:{number}", field=name)
            members = read_members(archive, caps)
            folder = task_checks.top_folder(m.path for m in members)
            if name == "repo" and strip_top_folder and folder is not None:
                members = _strip(archive, members, folder)
                warn(f"{tasks_path}:{number}: stripped '{folder}/' from {relative}")
            paths[name] = {m.path for m in members}
            digest = archive_sha256(archive, caps)
            if digest != pinned:
                data[f"{name}_sha256"] = digest
                changed = True
        if isinstance(task, RepoTask):
            _authoring(task, paths, f"{tasks_path}:{number}", warn)
        if changed:
            line = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        lines.append(line)
    body = ("\n".join(lines) + "\n").encode("utf-8")
    write_tasks(tasks_path, body)
    return sha256_bytes(body)


def _strip(archive: Path, members: list[Member], folder: str) -> list[Member]:
    """Rewrite a tar fixture without its one top-level folder (atomically); its members."""
    prefix = folder + "/"
    kept = [
        Member(m.path[len(prefix) :], m.is_dir, m.data, m.executable)
        for m in members
        if m.path.startswith(prefix)
    ]
    write_atomic(archive, build_tar(kept, uid=0, gid=0))
    return kept


def _authoring(
    task: RepoTask, paths: dict[str, set[str]], where: str, warn: Callable[[str], None]
) -> None:
    """Refuse a task line with an authoring mistake; warn about a suspicious fixture."""
    found = task_checks.problems(task, paths["repo"], paths["hidden"])
    if found:
        raise UserError(f"{where}: task {task.id!r} {found[0]}")
    folder = task_checks.top_folder(paths["repo"])
    if folder is not None:
        warn(
            f"warning: {where}: every entry of task {task.id!r}'s fixture sits under "
            f"'{folder}/', so the code lands in /workspace/{folder}/ and a hidden test may "
            f"import the image's own copy instead; if unintended, seal with --strip-top-folder "
            f"or rebuild the tar from inside the folder (tar -C {folder} -cf FIXTURE.tar .)"
        )


def write_tasks(tasks_path: Path, body: bytes) -> bool:
    """Replace tasks.jsonl with ``body`` atomically (an interrupted write leaves the old
    file); False, and nothing written, when it already holds exactly those bytes."""
    path = writable(tasks_path.parent, tasks_path.name, what="deltarun writes the task lines")
    if body == path.read_bytes():
        return False
    write_atomic(path, body)
    return True


def load_suite(
    tasks_path: Path, expected_sha256: str | None, caps: ArchiveCaps = DEFAULT_CAPS
) -> Suite:
    """Load a suite and verify every digest; ``expected_sha256`` pins tasks.jsonl itself.

    Raises ``DigestMismatch`` on the first file whose bytes differ from its pin,
    and ``UserError`` when an archive is unsealed or unsafe.
    """
    try:
        actual = sha256_capped(tasks_path, TASKS_MAX_BYTES, "tasks.jsonl")
    except FileNotFoundError as exc:
        raise UserError(
            f"{tasks_path}: tasks file not found; check suite.file in controls"
        ) from exc
    if expected_sha256 and actual != expected_sha256:
        raise DigestMismatch(
            f"{tasks_path}: digest mismatch: controls pin {expected_sha256}, file has {actual}; "
            "restore the suite, or seal it through the controls file (`deltarun seal "
            "controls.yaml`; sealing the suite alone pins nothing), which changes the protocol hash"
        )
    tasks = read_tasks(tasks_path)
    check_contexts(tasks_path, tasks)
    exposed: dict[str, tuple[str, ...]] = {}
    checks = GitChecks(tasks_path.resolve().parent, caps)
    for number, task in enumerate(tasks, start=1):
        members: dict[str, list[Member]] = {}
        git_facts = None
        if isinstance(task, RepoTask) and isinstance(task.repo, GitRepo):
            git_facts = _verify_git(task, f"{tasks_path}:{number}", checks)
        for name, relative, pinned in _archive_files(task):
            where = f"{tasks_path}:{number}"
            archive = inside(tasks_path.resolve().parent, relative, file=where, field=name)
            if not pinned:
                raise UserError(
                    f"{tasks_path}: task {task.id!r}: {name}_sha256 is empty; run `deltarun seal`"
                )
            try:
                digest = archive_sha256(archive, caps)
            except FileNotFoundError as exc:
                raise UserError(
                    f"{archive}: archive of task {task.id!r} not found; restore it or fix {name!r}"
                ) from exc
            if digest != pinned:
                raise DigestMismatch(
                    f"{archive}: digest mismatch for task {task.id!r}: pinned {pinned}, "
                    f"file has {digest}; restore the archive or re-seal the suite"
                )
            members[name] = read_members(archive, caps)
        if "hidden" in members and git_facts is not None:
            exposed[task.id] = hidden_in_tree(git_facts.entries, members["hidden"])
        elif "hidden" in members:
            exposed[task.id] = hidden_in_fixture(members["repo"], members["hidden"])
    return Suite(tasks_path.resolve(), actual, tuple(tasks), exposed)


def _verify_git(task: RepoTask, source: str, checks: GitChecks) -> GitFacts:
    """A git fixture's bundle digest and tree id must be the pinned ones (exit 3 otherwise)."""
    assert isinstance(task.repo, GitRepo)
    if not task.repo_tree:
        raise UserError(f"{source}: task {task.id!r}: repo_tree is empty; run `deltarun seal`")
    path = checks.path(task, source)
    if path.is_file() and is_bundle(path):
        if not task.repo_sha256:
            raise UserError(
                f"{source}: task {task.id!r}: repo_sha256 is empty; run `deltarun seal`"
            )
        digest = checks.bundle_sha256(path)
        if digest != task.repo_sha256:
            raise DigestMismatch(
                f"{path}: digest mismatch for task {task.id!r}: pinned {task.repo_sha256}, "
                f"file has {digest}; restore the bundle or re-seal the suite"
            )
    facts = checks.facts(task, source)
    if facts.tree != task.repo_tree:
        raise DigestMismatch(
            f"{path}: commit {task.repo.commit} of task {task.id!r} has tree {facts.tree}, the "
            f"task pins {task.repo_tree}; restore the repository or re-seal the suite"
        )
    return facts


def hidden_in_tree(entries: Sequence[TreeEntry], hidden: Sequence[Member]) -> tuple[str, ...]:
    """``hidden_in_fixture`` for a git tree: compared by blob id, without reading the tree."""
    have = {e.path: e.object_id for e in entries}
    width = len(next(iter(have.values()), "0" * 40))
    return tuple(
        sorted(
            m.path
            for m in hidden
            if not m.is_dir and m.path in have and have[m.path] == blob_id(m.data, width)
        )
    )


def hidden_in_fixture(fixture: Sequence[Member], hidden: Sequence[Member]) -> tuple[str, ...]:
    """The hidden files the fixture also holds, byte for byte at the same path: the agent
    could read them. A fixture file at a hidden file's path with other content is the old
    version the hidden one replaces, not an exposure."""
    have = {m.path: m.data for m in fixture if not m.is_dir}
    return tuple(sorted(m.path for m in hidden if not m.is_dir and have.get(m.path) == m.data))
