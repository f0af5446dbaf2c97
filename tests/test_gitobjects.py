"""runner.trees.gitobjects and runner.trees.staging's baseline, checked by the real git (no Docker).

The baseline git directory deltarun writes without git must be one git itself
accepts (fsck, verify-pack), with the tree id ``git add -A`` would give, and an
index whose stat data makes untouched files clean without reading them.
"""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from runner.sandbox.base import AGENT_UID
from runner.trees import gitobjects
from runner.trees.archives import SANDBOX_MTIME, Member
from runner.trees.cache import CacheDir
from runner.trees.staging import Staging

# Names chosen for git's tree order: "a-b" < "a.b" < "a/" (directories sort with a slash)
# < "a0", and non-ASCII bytes.
FILES = {
    "a-b": b"dash\n",
    "a.b": b"dot\n",
    "a/x.py": b"print('x')\n",
    "a/deep/er/y.txt": b"y" * 5000,
    "a0": b"",
    "run.sh": b"#!/bin/sh\necho hi\n",
    "caf\u00e9.txt": b"accent\n",
    "secret/key": b"forbidden\n",
}
EXECUTABLE = {"run.sh"}
GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "HOME": "/nonexistent"}


def members() -> list[Member]:
    return [Member(path, False, data, path in EXECUTABLE) for path, data in FILES.items()]


def git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **GIT_ENV}
    return subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=check
    )


def write_tree(root: Path, exclude: tuple[str, ...] = ()) -> None:
    """The files as the workspace tar leaves them: modes 0644/0755, modification time
    ``SANDBOX_MTIME``."""
    for path, data in FILES.items():
        if any(path == e or path.startswith(e + "/") for e in exclude):
            continue
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        target.chmod(0o755 if path in EXECUTABLE else 0o644)
        os.utime(target, (SANDBOX_MTIME, SANDBOX_MTIME))


def test_the_snapshot_tree_is_the_tree_git_add_gives(tmp_path: Path) -> None:
    write_tree(tmp_path)
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", "-A")
    expected = git(tmp_path, "write-tree").stdout.strip()
    files = [gitobjects.FileEntry(m.path.encode(), m.data, m.executable) for m in members()]
    assert gitobjects.snapshot(files).tree.hex() == expected


def unpack_baseline(tmp_path: Path, exclude: tuple[str, ...]) -> tuple[Path, dict[str, str]]:
    staging = Staging(CacheDir(tmp_path / "cache"))
    kit = staging.baseline("tar:test", members, exclude)
    assert kit is not None
    base = tmp_path / "baseline"
    with tarfile.open(kit) as archive:
        archive.extractall(base, filter="fully_trusted")
    work = tmp_path / "workspace"
    write_tree(work, exclude)
    env = {**GIT_ENV, "GIT_DIR": str(base / "git"), "GIT_WORK_TREE": str(work)}
    return work, env


def harness_git(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    command = ["git", "-c", "core.checkStat=minimal", "-c", "core.trustctime=false", *args]
    return subprocess.run(command, env={**os.environ, **env}, capture_output=True, text=True)


def test_the_baseline_is_a_repository_git_accepts(tmp_path: Path) -> None:
    _work, env = unpack_baseline(tmp_path, ("secret",))
    fsck = harness_git(env, "fsck", "--full", "--strict")
    assert fsck.returncode == 0, fsck.stderr
    packs = list((tmp_path / "baseline/git/objects/pack").glob("*.idx"))
    verify = harness_git(env, "verify-pack", "-v", str(packs[0]))
    assert verify.returncode == 0, verify.stderr
    listed = harness_git(env, "ls-tree", "-r", "--name-only", "HEAD").stdout.split("\n")
    assert "secret/key" not in listed and "a/deep/er/y.txt" in listed
    staged = harness_git(env, "ls-files", "-s").stdout
    real = tmp_path / "real"
    write_tree(real, ("secret",))
    git(real, "init", "-q")
    git(real, "add", "-A")
    assert staged == git(real, "ls-files", "-s").stdout
    assert "100755" in staged.split("run.sh")[0].rsplit("\n", 1)[-1]


def test_untouched_files_are_clean_by_their_stat_data_alone(tmp_path: Path) -> None:
    _work, env = unpack_baseline(tmp_path, ())
    # diff-files compares stat data only: exit 0 means git need not read any file.
    assert harness_git(env, "diff-files", "--quiet").returncode == 0
    # The default checks (inode, change time) would have had to read them all.
    strict = subprocess.run(
        ["git", "diff-files", "--quiet"], env={**os.environ, **env}, capture_output=True
    )
    assert strict.returncode == 1


@pytest.mark.parametrize(
    "change, expected",
    [
        (lambda w: (w / "a/x.py").write_bytes(b"print('y')\n"), "-print('x')"),
        (lambda w: (w / "a.b").unlink(), "deleted file mode 100644"),
        (lambda w: (w / "new.txt").write_bytes(b"n\n"), "new file mode 100644"),
        (lambda w: (w / "a-b").chmod(0o755), "new mode 100755"),
        (lambda w: (w / "a0").write_bytes(b"now not empty\n"), "+now not empty"),
    ],
    ids=["edit", "delete", "add", "chmod", "empty-file-filled"],
)
def test_the_patch_sees_every_kind_of_change(tmp_path: Path, change, expected) -> None:  # type: ignore[no-untyped-def]
    work, env = unpack_baseline(tmp_path, ())
    change(work)
    assert harness_git(env, "add", "-A").returncode == 0
    diff = harness_git(env, "diff", "--cached", "--binary", "HEAD").stdout
    assert expected in diff
    # Only the changed file is in the patch.
    assert diff.count("diff --git") == 1


def test_a_same_size_edit_is_seen(tmp_path: Path) -> None:
    """The edit bumps the modification time, which the stat check compares."""
    work, env = unpack_baseline(tmp_path, ())
    (work / "a.b").write_bytes(b"DOT\n")
    harness_git(env, "add", "-A")
    assert "+DOT" in harness_git(env, "diff", "--cached", "HEAD").stdout


def test_a_path_git_refuses_gets_no_staged_baseline(tmp_path: Path) -> None:
    staging = Staging(CacheDir(tmp_path / "cache"))
    fixture = [*members(), Member("sub/.GIT/config", False, b"x", False)]
    assert staging.baseline("tar:refused", lambda: fixture, ()) is None


def test_staged_entries_are_reused_and_keyed_by_the_exclusions(tmp_path: Path) -> None:
    staging = Staging(CacheDir(tmp_path / "cache"))
    first = staging.workspace("tar:k", members, ())
    assert staging.workspace("tar:k", members, ()) == first
    other = staging.workspace("tar:k", members, ("secret",))
    assert other != first
    assert (staging.hits, staging.misses) == (1, 2)
    with tarfile.open(other) as archive:
        names = archive.getnames()
        owners = {m.uid for m in archive.getmembers()}
    assert "secret/key" not in names and "a/x.py" in names
    assert owners == {AGENT_UID}
    assert CacheDir(tmp_path / "cache").entries(), "staged entries count against the cache cap"
