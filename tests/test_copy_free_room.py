"""A copy-free view has the room of a copy (issue 36, item 7), page for page, at every write.

A copied workspace is a tmpfs of the cap holding the fixture: rewriting a fixture file in
place takes no more room, removing one frees it, a write past the cap fails with ENOSPC
where the agent sees it. A view (``runner.sandbox.overlay``) must give the same results
for every sequence of writes, or the same agent gets another patch and verdict by which
path its worker took. Before the fix a view's writes landed on a tmpfs of the cap less the
tree's footprint: a file rewritten in place was counted twice (a 12 MiB file rewritten
under a 20 MiB cap failed), and a removed one was never given back.

Here: random edit sequences near the cap against a copy and a view side by side on the
host (every result, the tmpfs's use after every step, the tree at the end), the same
through real trials on both paths (patch and verdict), and the case that was graded a miss.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from runner.records import Outcome, Trial
from runner.sandbox import overlay
from tests.conftest import IN_CI
from tests.helpers import ADD_FIXTURE, make_suite, repo_task, write_agent
from tests.test_copy_free import views  # noqa: F401  (the fixture: views work on this host)
from tests.test_trial_docker import run_one

MiB = 1 << 20
# A fixture of a few large files and small ones, 9 MiB in all, under a 12 MiB cap.
TREE = {
    "data/a.bin": 4 * MiB,
    "data/b.bin": 3 * MiB + 5,
    "c.bin": 2 * MiB,
    "data/small.txt": 5000,
    "data/deep/d.txt": 100,
    "data/empty": 0,
}
CAP = 12 * MiB
# Simplest first (what hypothesis tries first, and shrinks towards): writes that meet the cap.
KINDS = ["create", "grow", "otrunc", "rewrite", "delete", "shrink", "rename", "renamedir"]
KINDS += ["link", "chmod"]
TARGETS = ["new1.bin", "data/a.bin", "data/b.bin", "c.bin", "data/small.txt", "data/new2.bin"]
TARGETS += ["data/deep/d.txt", "data/empty"]
OPS = st.lists(
    st.tuples(st.sampled_from(KINDS), st.sampled_from(TARGETS), st.sampled_from([12, 4, 8, 16, 1])),
    min_size=3,
    max_size=7,
)
# Sequences every run tries: a file rewritten in place, the room filled, a removal giving
# room back, filled again; a truncated rewrite, a growth, a renamed directory, a hard link
# into it, then the cap.
HARD = [
    [("rewrite", "data/a.bin", 1), ("create", "new1.bin", 16), ("delete", "c.bin", 1),
     ("create", "data/new2.bin", 12)],
    [("otrunc", "data/b.bin", 1), ("grow", "data/a.bin", 4), ("renamedir", "data/a.bin", 1),
     ("link", "data2/a.bin", 1), ("create", "new1.bin", 16)],
]  # fmt: skip


# One edit, the same program in a sandbox's agent and on the host: (kind, path, size in
# 256 KiB units); data in 64 KiB writes, so a write the room cannot take stops part way,
# as a copy stops it. Its result: "ok" or the error's name.
EDIT = """
import errno, os

def edit(root, kind, rel, units):
    path, size = os.path.join(root, rel), units << 18
    fill = b"\\0" + bytes([1 + units]) * 65535
    try:
        if kind == "rewrite":  # in place, no truncation
            with open(path, "r+b") as f:
                f.write(b"rewritten")
        elif kind == "otrunc":  # opened with O_TRUNC, written again at its old size
            old = os.path.getsize(path)
            fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
            try:
                while old > 0:
                    old -= os.write(fd, fill[: min(old, len(fill))])
            finally:
                os.close(fd)
        elif kind in ("grow", "create"):
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | (os.O_CREAT if kind == "create" else 0), 0o644)
            try:
                while size > 0:
                    size -= os.write(fd, fill[: min(size, len(fill))])
            finally:
                os.close(fd)
        elif kind == "shrink":
            os.truncate(path, size // 16)
        elif kind == "delete":
            os.remove(path)
        elif kind == "rename":
            os.rename(path, path + ".moved")
        elif kind == "renamedir":
            folder = os.path.join(root, os.path.dirname(rel) or "data")
            os.rename(folder, folder + "2")
        elif kind == "link":
            os.link(path, path + ".link")
        elif kind == "chmod":
            os.chmod(path, 0o600)
        return "ok"
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))
"""
edit_namespace: dict[str, Any] = {}
exec(EDIT, edit_namespace)
edit: Callable[[str, str, str, int], str] = edit_namespace["edit"]


def write_tree(root: Path) -> None:
    """The fixture's files (binary: NUL first, so git's patches of them stay small)."""
    for path, size in TREE.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes((b"\0" + bytes([len(path)]) * size)[:size])


def used(root: Path) -> int:
    info = os.statvfs(root)
    return (info.f_blocks - info.f_bfree) * info.f_frsize


def listing(root: Path) -> dict[str, tuple[Any, ...]]:
    """Every entry: type and mode, owner, links, size, content digest."""
    found: dict[str, tuple[Any, ...]] = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
        size = 0 if path.is_dir() else info.st_size
        links = 0 if path.is_dir() else info.st_nlink
        found[str(path.relative_to(root))] = (oct(info.st_mode), info.st_uid, links, size, digest)
    return found


@contextmanager
def copy_and_view(tmp: Path) -> Iterator[tuple[Path, Path, Path]]:
    """(copy, view, the view's tmpfs): the fixture copied into a tmpfs of the cap, and a view
    of it mounted as a sandbox mounts one, the agent's uid owning both."""
    tree, copy = tmp / "tree", tmp / "copy"
    write_tree(tree)
    subprocess.run(["chown", "-R", "1000:1000", str(tree)], check=True)
    copy.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={CAP},uid=1000,gid=1000,mode=0755", "tmpfs", copy],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        if IN_CI:
            pytest.fail(f"CI may mount: {made.stderr}")
        pytest.skip(f"this process may not mount: {made.stderr}")
    try:
        subprocess.run(["cp", "-a", f"{tree}/.", str(copy)], check=True)
        view = overlay.mount_view(tree, CAP, 1000, 0o755, tmp / "views")
        try:
            yield copy, view.merged, view.rw
        finally:
            overlay.unmount(view)
    finally:
        subprocess.run(["umount", "-l", copy], check=True)


@given(ops=OPS)
@example(ops=HARD[0])
@example(ops=HARD[1])
@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
def test_every_write_has_the_result_it_has_in_a_copy(
    ops: list[tuple[str, str, int]], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Each step's result (ok, ENOSPC, ENOENT, ...) and the tmpfs's use after it are the
    copy's; the trees are the same at the end. Runs as root on the host (as views do)."""
    tmp = tmp_path_factory.mktemp("room")
    with copy_and_view(tmp) as (copy, view, upper):
        assert listing(view) == listing(copy)  # the view as given: a copy of the fixture
        assert os.statvfs(view)[:4] == os.statvfs(copy)[:4]  # `df` reads the same: size, use
        steps = []
        for kind, path, units in ops:
            on_copy = edit(str(copy), kind, path, units)
            on_view = edit(str(view), kind, path, units)
            steps.append((kind, path, units, on_copy, on_view, used(copy), used(upper)))
            assert (on_view, used(upper)) == (on_copy, used(copy)), steps
        assert listing(view) == listing(copy), steps
    shutil.rmtree(tmp, ignore_errors=True)


# --- the same through real trials ----------------------------------------------------------

FIX = "sed -i 's/a - b/a + b/' calc/__init__.py\n"
# The hidden test: add() fixed and data/a.bin still there (an edit sequence may remove it).
HIDDEN: dict[str, str | bytes] = {
    "tests/test_hidden.py": (
        "import os\n\nfrom calc import add\n\n\ndef test_add():\n"
        "    assert add(2, 3) == 5\n    assert os.path.isfile('data/a.bin')\n"
    )
}


def fixture_files() -> dict[str, str | bytes]:
    files: dict[str, str | bytes] = dict(ADD_FIXTURE)
    for path, size in TREE.items():
        files[path] = (b"\0" + bytes([len(path)]) * size)[:size]
    return files


def edit_agent(root: Path, name: str, ops: list[tuple[str, str, int]]) -> dict[str, Any]:
    """An agent that fixes add(), makes the edits in order, and writes each result into
    ops.log, made first at its final size so writing it needs no room at the end."""
    program = (
        EDIT
        + "\nlog = open('ops.log', 'w+b'); log.write(b' ' * 4096); log.flush()\n"
        + f"results = [edit('.', k, p, u) for k, p, u in {json.dumps(ops)}]\n"
        + "log.seek(0); log.write(repr(results).encode()[:4096]); log.close()\n"
    )
    directory = root / "agents" / name
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "edits.py").write_text(program)
    (directory / "run.sh").write_text(FIX + "python3 /opt/agent/edits.py\n")
    return {"type": "command", "dir": f"agents/{name}", "argv": ["sh", "/opt/agent/run.sh"]}


def both_paths(
    docker_api: Any, controls: Path, arm: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[Trial, Trial]:
    """The arm's trial where views work, then on the copy path."""
    viewed = run_one(docker_api, controls, "t1", arm)
    with monkeypatch.context() as forced:
        forced.setenv("DELTARUN_WORKSPACES", "copy")
        copied = run_one(docker_api, controls, "t1", arm)
    return viewed, copied


@pytest.mark.docker
@pytest.mark.usefixtures("views")
@given(ops=OPS)
@example(ops=HARD[0])
@example(ops=HARD[1])
@settings(
    max_examples=8,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_any_edits_near_the_cap_give_the_same_patch_and_verdict_on_both_paths(
    ops: list[tuple[str, str, int]],
    tmp_path_factory: pytest.TempPathFactory,
    docker_api: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = tmp_path_factory.mktemp("edits")
    controls = make_suite(
        root,
        [repo_task("t1")],
        [
            {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
            {"name": "edits", "agent": edit_agent(root, "edits", ops)},
        ],
        fixtures={"t1": fixture_files()},
        hidden={"t1": HIDDEN},
        runtime={"limits": {"workspace": f"{CAP >> 20}m", "memory": "1g"}},
    )
    viewed, copied = both_paths(docker_api, controls, "edits", monkeypatch)
    assert viewed.error is None and copied.error is None, (viewed.error, copied.error)
    assert "ops.log" in copied.patch, copied.patch[:2000]
    assert (viewed.outcome, viewed.reason) == (copied.outcome, copied.reason), ops
    assert viewed.patch_sha256 == copied.patch_sha256, (ops, viewed.patch[:3000])
    shutil.rmtree(root, ignore_errors=True)


# --- the case graded a miss ----------------------------------------------------------------

BIG = 12 * MiB
BIG_LINE = b"0123456789abcdef" * 7 + b"\n"  # 113 bytes a line
BIG_FILE = b"VERSION = 1\n" + BIG_LINE * ((BIG - 12) // len(BIG_LINE))
REWRITE = (  # the whole file read, changed, and written back over itself (O_TRUNC)
    "python3 -c \"p = 'table.txt'; d = open(p, 'rb').read(); "
    "open(p, 'wb').write(d.replace(b'VERSION = 1', b'VERSION = 2', 1))\"\n"
)
BIG_HIDDEN: dict[str, str | bytes] = {
    "tests/test_hidden.py": (
        "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
        "    with open('table.txt', 'rb') as f:\n        assert f.readline() == b'VERSION = 2\\n'\n"
        f"        assert len(f.read()) == {len(BIG_FILE) - 12}\n"
    )
}
GOLD = (
    "diff --git a/calc/__init__.py b/calc/__init__.py\n"
    "--- a/calc/__init__.py\n+++ b/calc/__init__.py\n"
    "@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n"
    "diff --git a/table.txt b/table.txt\n"
    "--- a/table.txt\n+++ b/table.txt\n"
    "@@ -1,2 +1,2 @@\n-VERSION = 1\n+VERSION = 2\n " + BIG_LINE.decode()
)


@pytest.mark.docker
@pytest.mark.usefixtures("views")
def test_a_12_mib_file_rewritten_under_a_20_mib_cap_passes_on_both_paths(
    tmp_path: Path, docker_api: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """By an agent in its workspace, and by a gold patch (``git apply`` in the agent's
    sandbox, then in the verify sandbox): a real fix of a file 60% of the cap."""
    (tmp_path / "gold").mkdir()
    (tmp_path / "gold" / "t1.diff").write_text(GOLD)
    controls = make_suite(
        tmp_path,
        [repo_task("t1")],
        [
            {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
            {"name": "agent", "agent": write_agent(tmp_path, "agent", FIX + REWRITE)},
            {"name": "gold", "agent": {"type": "patch", "dir": "gold"}},
        ],
        fixtures={"t1": {**ADD_FIXTURE, "table.txt": BIG_FILE}},
        hidden={"t1": BIG_HIDDEN},
        runtime={"limits": {"workspace": "20m", "memory": "1g"}},
    )
    for arm in ("agent", "gold"):
        viewed, copied = both_paths(docker_api, controls, arm, monkeypatch)
        for trial in (viewed, copied):
            assert trial.outcome is Outcome.SUCCESS, (arm, trial.reason, trial.verify_log[-800:])
        assert viewed.patch_sha256 == copied.patch_sha256
        assert "+VERSION = 2" in viewed.patch


@pytest.mark.docker
@pytest.mark.usefixtures("views")
def test_the_verify_phase_measures_the_patched_tree_as_a_copy_does(
    tmp_path: Path, docker_api: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent fills its workspace to the last block; the verify sandbox's tree also holds
    the fixture's .git/ (forbidden, absent from the agent's), so it is past the cap: a miss
    on both paths, and the size its reason names is the same number on both."""
    fill = (
        "dd if=/dev/zero of=pad.bin bs=64k 2>/dev/null || true\n"
        "dd if=/dev/zero of=pad2.bin bs=4k 2>/dev/null || true\n"
    )
    blob = bytes(range(256)) * (16 << 10)
    controls = make_suite(
        tmp_path,
        [repo_task("t1")],
        [
            {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
            {"name": "filler", "agent": write_agent(tmp_path, "filler", FIX + fill)},
        ],
        fixtures={"t1": {**ADD_FIXTURE, "c.bin": fixture_files()["c.bin"], ".git/x": blob}},
        runtime={"limits": {"workspace": f"{CAP >> 20}m", "memory": "1g"}},
    )
    viewed, copied = both_paths(docker_api, controls, "filler", monkeypatch)
    assert copied.outcome is Outcome.MISS, (copied.reason, copied.verify_log[-800:])
    assert "more than runtime.limits.workspace" in (copied.reason or ""), copied.reason
    assert (viewed.outcome, viewed.reason) == (copied.outcome, copied.reason)
    assert viewed.patch_sha256 == copied.patch_sha256


def test_edit_names_every_error_it_meets(tmp_path: Path) -> None:
    """The edit program reports what failed, so a difference between paths shows."""
    assert edit(str(tmp_path), "delete", "missing", 1) == errno.errorcode[errno.ENOENT]
    (tmp_path / "f").write_bytes(b"x")
    assert edit(str(tmp_path), "grow", "f", 1) == "ok"
    assert (tmp_path / "f").stat().st_size == 1 + (1 << 18)
