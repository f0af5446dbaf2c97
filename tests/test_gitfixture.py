"""Git-tree fixtures: sealed by tree id and bundle digest, materialised as exactly the tree."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from runner.config.loader import load_controls, protocol_hash
from runner.errors import ArchiveError, DigestMismatch, UserError
from runner.records import RepoTask
from runner.suite.load import load_suite, seal
from runner.suite.sealing import seal_target
from runner.trees.archives import ArchiveCaps
from runner.trees.cache import CacheDir
from runner.trees.gitfixture import GitStore, blob_id
from runner.trees.inputs import LocalInputs, MemberCache
from tests.helpers import ADD_FIXTURE, ADD_GOLD, ADD_HIDDEN, PY_IMAGE, make_suite

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


def sh_git(repo: Path, *args: str) -> str:
    result = subprocess.run(
        ["git", "-C", str(repo), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **GIT_ENV},
        check=True,
    )
    return result.stdout.strip()


def make_repo(root: Path, history: list[dict[str, str]]) -> tuple[Path, list[str]]:
    """A work repository with one commit per mapping of files (written on top); commit ids."""
    root.mkdir(parents=True, exist_ok=True)
    sh_git(root, "init", "-q", "-b", "main")
    commits = []
    for files in history:
        for name, text in files.items():
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        sh_git(root, "add", "-A")
        sh_git(root, "commit", "-q", "-m", f"commit {len(commits)}")
        commits.append(sh_git(root, "rev-parse", "HEAD"))
    return root, commits


def bundle(repo: Path, out: Path, *refs: str) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    sh_git(repo, "bundle", "create", "-q", str(out), *(refs or ("--all",)))
    return out


def git_task(task_id: str, commit: str, source: str = "repos/calc.bundle") -> dict[str, Any]:
    return {
        "id": task_id,
        "kind": "ordinary",
        "prompt": "Fix add().",
        "repo": {"git": source, "commit": commit},
        "hidden": f"hidden/{task_id}.tar",
        "hidden_tests": ["tests/test_hidden.py"],
        "image": PY_IMAGE,
        "timeout_s": 60,
    }


# The repository's future: a later commit holds the fix, which the agent must never see.
FUTURE = {"calc/__init__.py": "def add(a, b):\n    return a + b\n"}
ATTRS = {
    ".gitattributes": "skipped.txt export-ignore\nsubst.txt export-subst\n",
    "skipped.txt": "kept by deltarun\n",
    "subst.txt": "$Format:%H$\n",
}


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("DELTARUN_CACHE", str(cache))
    return cache


def git_suite(tmp_path: Path, tasks: int = 2, bare: bool = False) -> tuple[Path, list[str]]:
    repo, commits = make_repo(tmp_path / "work", [{**ADD_FIXTURE, **ATTRS}, FUTURE])
    suite = tmp_path / "run" / "suite"
    if bare:
        subprocess.run(
            ["git", "clone", "-q", "--bare", str(repo), str(suite / "repos" / "calc.git")],
            check=True,
            env={**os.environ, **GIT_ENV},
        )
        source = "repos/calc.git"
    else:
        bundle(repo, suite / "repos" / "calc.bundle")
        source = "repos/calc.bundle"
    gold = tmp_path / "run" / "gold"  # beside the controls: a path they name stays inside
    gold.mkdir(parents=True, exist_ok=True)
    for i in range(tasks):
        (gold / f"g{i}.diff").write_text(ADD_GOLD)
    controls = make_suite(
        tmp_path / "run",
        [git_task(f"g{i}", commits[0], source) for i in range(tasks)],
        [
            {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
            {"name": "gold", "agent": {"type": "patch", "dir": "gold"}},
        ],
        hidden={f"g{i}": ADD_HIDDEN for i in range(tasks)},
    )
    return controls, commits


def tasks_of(controls: Path) -> list[dict[str, Any]]:
    path = controls.parent / "suite" / "tasks.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("bare", [False, True])
def test_seal_pins_tree_and_the_workspace_is_exactly_the_tree(tmp_path: Path, bare: bool) -> None:
    controls, commits = git_suite(tmp_path, bare=bare)
    work = tmp_path / "work"
    tree = sh_git(work, "rev-parse", f"{commits[0]}^{{tree}}")
    for task in tasks_of(controls):
        assert task["repo_tree"] == tree
        assert bool(task.get("repo_sha256")) is not bare  # a bare directory is pinned by its tree
    loaded = load_controls(controls)
    suite = load_suite(loaded.suite_path, loaded.controls.suite.sha256)
    task = suite.task("g0")
    assert isinstance(task, RepoTask)
    members = {m.path: m for m in LocalInputs(suite).fixture(task)}
    files = {p: m.data.decode() for p, m in members.items() if not m.is_dir}
    # Every file of the tree, byte for byte, whatever .gitattributes ask of `git archive`;
    # no .git of the source and nothing of the later commit.
    assert files == {**ADD_FIXTURE, **ATTRS}
    assert not any(p == ".git" or p.startswith(".git/") for p in members)
    assert suite.exposed["g0"] == ()


def test_run_refuses_a_bundle_or_tree_that_changed(tmp_path: Path) -> None:
    controls, _ = git_suite(tmp_path)
    loaded = load_controls(controls)
    tasks_path = loaded.suite_path
    # Another bundle at the same path (same commits, other bytes): the bundle digest stops it.
    sh_git(tmp_path / "work", "branch", "-q", "extra")
    bundle(tmp_path / "work", tasks_path.parent / "repos" / "calc.bundle")
    with pytest.raises(DigestMismatch, match=r"calc\.bundle: digest mismatch for task 'g0'"):
        load_suite(tasks_path, None)
    # A re-sealed line whose tree pin was edited: exit 3 naming both trees.
    seal(tasks_path)
    lines = tasks_of(controls)
    lines[0]["repo_tree"] = "0" * 40
    tasks_path.write_text("".join(json.dumps(t) + "\n" for t in lines))
    with pytest.raises(DigestMismatch, match=r"has tree .* the task pins 0000"):
        load_suite(tasks_path, None)


def test_a_bundle_missing_the_commit_is_one_line(tmp_path: Path) -> None:
    repo, commits = make_repo(tmp_path / "work", [ADD_FIXTURE, FUTURE])
    suite = tmp_path / "suite"
    # A bundle of the first commit only does not contain the second.
    sh_git(repo, "branch", "-q", "old", commits[0])
    bundle(repo, suite / "repos" / "calc.bundle", "old")
    (suite / "tasks.jsonl").write_text(json.dumps(git_task("g0", commits[1])) + "\n")
    (suite / "hidden").mkdir()
    from tests.helpers import write_tar

    write_tar(suite / "hidden" / "g0.tar", ADD_HIDDEN)
    with pytest.raises(UserError, match=f"does not contain commit {commits[1]}") as caught:
        seal(suite / "tasks.jsonl")
    assert "\n" not in str(caught.value) and "tasks.jsonl:1" in str(caught.value)


def test_tree_entries_follow_the_archive_rules(tmp_path: Path) -> None:
    repo, commits = make_repo(tmp_path / "work", [ADD_FIXTURE])
    (repo / "link").symlink_to("/etc/passwd")
    sh_git(repo, "add", "-A")
    sh_git(repo, "commit", "-q", "-m", "link")
    linked = sh_git(repo, "rev-parse", "HEAD")
    suite = tmp_path / "suite"
    bundle(repo, suite / "repos" / "calc.bundle")
    from tests.helpers import write_tar

    write_tar(suite / "hidden" / "g0.tar", ADD_HIDDEN)
    (suite / "tasks.jsonl").write_text(json.dumps(git_task("g0", linked)) + "\n")
    with pytest.raises(ArchiveError, match="'link' is a symbolic link"):
        seal(suite / "tasks.jsonl")
    (suite / "tasks.jsonl").write_text(json.dumps(git_task("g0", commits[0])) + "\n")
    with pytest.raises(ArchiveError, match="over the cap of 2"):
        seal(suite / "tasks.jsonl", ArchiveCaps(max_members=2))
    seal(suite / "tasks.jsonl")  # within the default caps


def test_archive_caps_are_controls_settings_in_the_protocol_hash(tmp_path: Path) -> None:
    controls, _ = git_suite(tmp_path, tasks=1)
    before = load_controls(controls)
    # Unset caps do not change the hash of controls written before the setting existed.
    assert before.controls.runtime.archive is None
    assert protocol_hash(before.controls, before.agent_dir_digests) == before.protocol_sha256
    text = controls.read_text().replace("runtime:\n", "runtime:\n  archive: {max_members: 3}\n", 1)
    controls.write_text(text)
    capped = load_controls(controls)
    assert capped.protocol_sha256 != before.protocol_sha256
    with pytest.raises(ArchiveError, match="over the cap of 3"):
        seal_target(controls, load_controls)


def test_hidden_file_shipped_in_the_tree_is_found_by_blob_id(tmp_path: Path) -> None:
    repo, commits = make_repo(tmp_path / "work", [{**ADD_FIXTURE, **ADD_HIDDEN}])
    store = GitStore(CacheDir(tmp_path / "c"))
    bare = store.repository(bundle(repo, tmp_path / "b.bundle"))
    tree = store.tree_of(bare, commits[0], "test")
    entries = {e.path: e for e in store.entries(bare, tree)}
    data = ADD_HIDDEN["tests/test_hidden.py"].encode()
    assert entries["tests/test_hidden.py"].object_id == blob_id(data, 40)
    controls = tmp_path / "s"
    suite = controls / "suite"
    bundle(repo, suite / "repos" / "calc.bundle")
    from tests.helpers import write_tar

    write_tar(suite / "hidden" / "g0.tar", ADD_HIDDEN)
    (suite / "tasks.jsonl").write_text(json.dumps(git_task("g0", commits[0])) + "\n")
    seal(suite / "tasks.jsonl")
    assert load_suite(suite / "tasks.jsonl", None).exposed["g0"] == ("tests/test_hidden.py",)


def test_cache_evicts_least_recently_used_and_clears(tmp_path: Path) -> None:
    cache = CacheDir(tmp_path / "c", max_bytes=250)
    for name, age in (("old", 300), ("mid", 200), ("new", 100)):
        path = cache.path(f"trees/{name}.tar")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * 100)
        stamp = path.stat().st_mtime - age
        os.utime(path, (stamp, stamp))
    assert cache.evict() == ["trees/old.tar"]
    assert sorted(e.key for e in cache.entries()) == ["trees/mid.tar", "trees/new.tar"]
    assert cache.clear() == (2, 200)
    assert cache.entries() == []


def test_member_cache_keeps_memory_within_its_budget() -> None:
    from runner.trees.archives import Member

    cache = MemberCache(budget=1000)
    loads: list[str] = []

    def loader(key: str, size: int) -> Any:
        def load() -> list[Member]:
            loads.append(key)
            return [Member("f", False, b"x" * size, False)]

        return load

    cache.get("small", loader("small", 100))
    cache.get("small", loader("small", 100))
    cache.get("big", loader("big", 5000))  # over the budget: read each time, never kept
    cache.get("big", loader("big", 5000))
    assert loads == ["small", "big", "big"]


def test_a_git_fixture_runs_end_to_end(tmp_path: Path, docker_api: object) -> None:
    from tests.conftest import run_cli

    controls, _ = git_suite(tmp_path, tasks=1)
    env = {"DELTARUN_CACHE": str(tmp_path / "cache")}
    result = run_cli("run", str(controls), "--out", str(tmp_path / "out"), "-j", "2", env=env)
    assert result.returncode == 0, result.stderr
    outcomes = {
        json.loads(line)["arm"]: json.loads(line)["outcome"]
        for line in (tmp_path / "out" / "trials.jsonl").read_text().splitlines()
    }
    assert outcomes == {"ctrl": "miss", "gold": "success"}


@pytest.mark.parametrize("bare", [False, True])
def test_a_repository_travels_once_and_workers_materialise_the_pinned_tree(
    tmp_path: Path, redis_server: Any, bare: bool
) -> None:
    from runner.distributed import protocol_bundle as bundles
    from runner.distributed.blobs import BlobStore

    controls, _ = git_suite(tmp_path, tasks=3, bare=bare)
    loaded = load_controls(controls)
    suite = load_suite(loaded.suite_path, loaded.controls.suite.sha256)
    client = redis_server.client()
    published = bundles.publish(loaded, suite, BlobStore(client, tmp_path / "c1" / "blobs"))
    # Three tasks over one repository: one bundle blob.
    assert list(published.git_blobs) == ["repos/calc.git" if bare else "repos/calc.bundle"]
    blobs = {k for k in client.keys("deltarun:blob:*")}
    # The suite, one bundle, the hidden archives (identical bytes) and the gold arm's patches.
    assert len(blobs) == 4
    worker = BlobStore(client, tmp_path / "w" / "blobs")
    protocol = bundles.load(client, worker, loaded.protocol_sha256)
    inputs = bundles.RemoteInputs(worker, protocol.git_blobs)
    expected = {m.path: m.data for m in LocalInputs(suite).fixture(suite.task("g0"))}  # type: ignore[arg-type]
    for task_id in ("g0", "g1", "g2"):
        task = protocol.tasks[task_id]
        assert isinstance(task, RepoTask)
        assert {m.path: m.data for m in inputs.fixture(task)} == expected
    cached = CacheDir(tmp_path / "w")
    assert sorted(e.key.split("/")[0] for e in cached.entries()) == [
        "blobs",
        "blobs",
        "blobs",
        "git",
        "trees",
    ]


def test_gc_cache_empties_the_cache(tmp_path: Path) -> None:
    from tests.conftest import run_cli

    git_suite(tmp_path, tasks=1)
    cache = tmp_path / "cache"
    assert CacheDir(cache).entries()  # sealing fetched the bundle into the cache
    env = {"DELTARUN_CACHE": str(cache)}
    dry = run_cli("gc", "--cache", "--dry-run", env=env)
    assert dry.returncode == 0 and "would remove 1 entries" in dry.stdout
    done = run_cli("gc", "--cache", env=env)
    assert done.returncode == 0 and "removed 1 cache entries" in done.stdout, done.stderr
    assert CacheDir(cache).entries() == []


def test_bad_git_sources_are_one_line_from_the_cli(tmp_path: Path) -> None:
    from tests.conftest import run_cli

    controls, commits = git_suite(tmp_path, tasks=1)
    env = {"DELTARUN_CACHE": str(tmp_path / "cache2")}
    tasks_path = controls.parent / "suite" / "tasks.jsonl"
    line = json.loads(tasks_path.read_text())
    cases = {
        "missing": ({**line, "repo": {"git": "repos/nope.bundle", "commit": commits[0]}}, 1),
        "not a commit id": ({**line, "repo": {"git": "repos/calc.bundle", "commit": "main"}}, 1),
        "unknown commit": ({**line, "repo": {"git": "repos/calc.bundle", "commit": "a" * 40}}, 1),
        "garbage bundle": (line, 1),
    }
    for what, (task, code) in cases.items():
        if what == "garbage bundle":
            (tasks_path.parent / "repos" / "calc.bundle").write_bytes(b"# v2 git bundle\nnot\n")
        tasks_path.write_text(json.dumps(task) + "\n")
        result = run_cli("seal", str(controls), env=env)
        assert result.returncode == code, (what, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in result.stderr, (what, result.stderr)
        assert "tasks.jsonl" in lines[0] or "calc.bundle" in lines[0], (what, lines[0])


def test_a_tree_bomb_is_refused_while_git_lists_it(tmp_path: Path) -> None:
    """A tree naming one subtree twice, 40 levels down, lists 2^40 paths from a bundle of a
    few kilobytes: seal stops git as soon as it has listed more files than the cap."""
    import time

    repo = tmp_path / "work"
    repo.mkdir()
    sh_git(repo, "init", "-q", "-b", "main")

    def write(*args: str, stdin: str) -> str:
        return subprocess.run(
            ["git", "-C", str(repo), *args],
            input=stdin,
            capture_output=True,
            text=True,
            env={**os.environ, **GIT_ENV},
            check=True,
        ).stdout.strip()

    node = write("hash-object", "-w", "--stdin", stdin="x\n")
    kind = "100644 blob"
    for _ in range(40):
        node = write("mktree", stdin=f"{kind} {node}\ta\n{kind} {node}\tb\n")
        kind = "040000 tree"
    commit = write("commit-tree", node, "-m", "bomb", stdin="")
    sh_git(repo, "update-ref", "refs/heads/main", commit)
    suite = tmp_path / "suite"
    bundle(repo, suite / "repos" / "calc.bundle")
    from tests.helpers import write_tar

    write_tar(suite / "hidden" / "g0.tar", ADD_HIDDEN)
    (suite / "tasks.jsonl").write_text(json.dumps(git_task("g0", commit)) + "\n")
    started = time.monotonic()
    with pytest.raises(ArchiveError, match="more than 20000 files, over the cap of 20000"):
        seal(suite / "tasks.jsonl")
    assert time.monotonic() - started < 30
