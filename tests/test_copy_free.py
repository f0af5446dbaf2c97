"""Copy-free workspaces (``runner.sandbox.overlay``): ``/workspace`` as a copy-on-write view of
the fixture's tree staged on the host, where this process may mount and the engine sees its
mounts (root here, as in CI), the copy path elsewhere.

What must hold for every trial, whichever path: the agent's writes (edits, removals, mode
changes, hard links, new files) never reach the staged tree or another trial; the workspace
has the owner, mode and size cap a copied one has, in both sandboxes; the two paths give
the same patch and the same verdict; a killed owner's views are unmounted by ``gc``; the
cache never evicts a tree a live view reads. The real engine and real mounts throughout.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from runner.records import Outcome
from runner.sandbox import overlay
from runner.sandbox.engine import image_id
from runner.sandbox.labels import LABEL_PREFIX
from runner.sandbox.view_probe import views_work
from runner.trees.cache import CacheDir
from tests.conftest import IN_CI, run_cli
from tests.helpers import ADD_FIXTURE, ADD_HIDDEN, PY_IMAGE, make_suite, repo_task, write_agent
from tests.test_trial_docker import run_one

# Every kind of write an agent can make to files it was given, then what it saw.
VANDAL = """
echo changed >> README.md
rm calc/__init__.py
chmod 000 tests
ln README.md hardlink
mkdir -p new && echo fresh > new/file
touch -d 2001-01-01 tests/__init__.py
stat -c '%u %a' /workspace > owner.txt
"""


@pytest.fixture
def views(docker_api: Any) -> None:
    """Copy-free workspaces work on this host (root, the engine here): CI has them."""
    digest = image_id(docker_api, PY_IMAGE)
    why = views_work(docker_api, digest, None, {f"{LABEL_PREFIX}deadline": "0"})
    if why is not None:
        if IN_CI:
            pytest.fail(f"copy-free workspaces do not work in CI: {why}")
        pytest.skip(f"copy-free workspaces do not work here: {why}")


def my_views() -> list[Path]:
    root = overlay.views_root()
    if not root.is_dir():
        return []
    return [p for p in root.iterdir() if p.name.startswith(f"{os.getpid()}-")]


def staged_trees() -> list[Path]:
    return sorted(CacheDir().root.glob("staged/*.tree.d"))


def tree_files(root: Path) -> dict[str, tuple[bytes, int, int]]:
    """Each file of a tree: its bytes, owner and mode."""
    found: dict[str, tuple[bytes, int, int]] = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        data = path.read_bytes() if path.is_file() else b""
        found[str(path.relative_to(root))] = (data, info.st_uid, info.st_mode & 0o7777)
    return found


# What /workspace and /baseline are mounted as (overlay: a view; tmpfs: a copy).
MOUNTED = (
    'for m in workspace baseline; do echo $m $(grep " /$m " /proc/self/mountinfo '
    "| sed 's/.* - //' | cut -d' ' -f1); done > fs.txt\n"
)


def vandal_suite(tmp_path: Path, script: str = VANDAL) -> Path:
    return make_suite(
        tmp_path,
        [repo_task("t1")],
        [
            {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
            {"name": "vandal", "agent": write_agent(tmp_path, "vandal", script)},
        ],
    )


@pytest.mark.docker
def test_the_agents_writes_never_reach_the_staged_tree_or_the_next_trial(
    tmp_path: Path, docker_api: Any, views: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DELTARUN_CACHE", str(tmp_path / "cache"))  # its trees alone
    controls = vandal_suite(tmp_path, VANDAL + MOUNTED)
    vandal = run_one(docker_api, controls, "t1", "vandal")
    assert vandal.error is None, vandal
    assert "+workspace overlay" in vandal.patch  # the copy-free path, for both
    assert "+baseline overlay" in vandal.patch
    assert "+1000 755" in vandal.patch  # /workspace as a copied one: the agent's, 0755
    assert "+changed" in vandal.patch and "deleted file mode" in vandal.patch
    assert "new/file" in vandal.patch and "hardlink" in vandal.patch
    trees = staged_trees()  # the agent's (forbidden paths out) and the verify sandbox's
    assert len(trees) == 2, "no staged tree: the trial did not take the copy-free path"
    pristine = {
        name: (content.encode(), 1000, 0o644) for name, content in sorted(ADD_FIXTURE.items())
    }
    for tree in trees:
        root = tree.stat()  # a host user with the agent's uid cannot reach the files
        assert (root.st_uid, root.st_mode & 0o777) == (0, 0o700)
        files = {k: v for k, v in tree_files(tree).items() if v[0] or k in pristine}
        assert files == pristine, f"the staged tree {tree} changed"
        assert not (tree / "new").exists() and not (tree / "hardlink").exists()
    control = run_one(docker_api, controls, "t1", "ctrl")  # the same staged tree, untouched
    assert control.outcome is Outcome.MISS and control.patch == ""
    assert my_views() == []


@pytest.mark.docker
def test_the_verify_sandbox_view_is_root_owned_sticky_and_holds_the_fixture(
    tmp_path: Path, docker_api: Any, views: None
) -> None:
    """The hidden test asserts what the verify sandbox's /workspace is; it passes only if the
    fix is there too."""
    checks = (
        "import os\n\nfrom calc import add\n\n\ndef test_add():\n"
        "    info = os.stat('/workspace')\n"
        "    assert info.st_uid == 0 and info.st_mode & 0o7777 == 0o1777, oct(info.st_mode)\n"
        "    assert open('/workspace/README.md').read() == 'calc\\n'\n"
        "    mounts = open('/proc/self/mountinfo').read().splitlines()\n"
        "    assert any(' /workspace ' in m and ' - overlay ' in m for m in mounts), mounts\n"
        "    assert add(2, 3) == 5\n"
    )
    fixer = write_agent(tmp_path, "fixer", "sed -i 's/a - b/a + b/' calc/__init__.py\n")
    controls = make_suite(
        tmp_path,
        [repo_task("t1")],
        [
            {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
            {"name": "fixer", "agent": fixer},
        ],
        hidden={"t1": {**ADD_HIDDEN, "tests/test_hidden.py": checks}},
    )
    fixed = run_one(docker_api, controls, "t1", "fixer")
    assert fixed.outcome is Outcome.SUCCESS, fixed.verify_log
    assert my_views() == []


@pytest.mark.docker
def test_a_view_has_the_size_cap_of_a_copied_workspace(
    tmp_path: Path, docker_api: Any, views: None
) -> None:
    filler = write_agent(
        tmp_path,
        "filler",
        "dd if=/dev/zero of=big bs=1M count=64 2>/dev/null; code=$?\n"
        'kib=$(du -k big | cut -f1); rm -f big; echo "dd=$code kib=$kib" > result.txt\n',
    )
    controls = make_suite(
        tmp_path,
        [repo_task("t1")],
        [
            {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
            {"name": "filler", "agent": filler},
        ],
        runtime={"limits": {"workspace": "16m"}},
    )
    trial = run_one(docker_api, controls, "t1", "filler")
    result = next(line for line in trial.patch.splitlines() if line.startswith("+dd="))
    code, kib = (int(part.split("=")[1]) for part in result[1:].split())
    assert code != 0, result  # the 64 MB write failed: no space
    assert 8 * 1024 < kib <= 16 * 1024, result  # it filled the cap, no more


@pytest.mark.docker
def test_both_paths_give_the_same_patch_and_verdict(
    tmp_path: Path, docker_api: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The view path (where it works) and the copy path (forced) on the same agent."""
    controls = vandal_suite(tmp_path)
    default = run_one(docker_api, controls, "t1", "vandal")
    monkeypatch.setenv("DELTARUN_WORKSPACES", "copy")
    copied = run_one(docker_api, controls, "t1", "vandal")
    assert default.error is None and copied.error is None
    assert (default.outcome, default.patch) == (copied.outcome, copied.patch)


@pytest.mark.docker
def test_a_killed_owners_views_are_unmounted_by_gc(tmp_path: Path, docker_api: Any) -> None:
    """A process that mounted a view and was SIGKILLed: `gc --dry-run` names it, `gc`
    unmounts it; a live owner's view is left alone."""
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "f").write_text("x")
    base = tmp_path / "views"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from runner.sandbox import overlay\n"
            "v = overlay.mount_view(Path(sys.argv[1]), 1 << 20, 0, 0o755, Path(sys.argv[2]))\n"
            "print(v.root, flush=True); time.sleep(300)\n",
            str(tree),
            str(base),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = holder.stdout.readline().strip() if holder.stdout else ""
        if not line:
            problem = holder.stderr.read() if holder.stderr else ""
            if IN_CI or "Operation not permitted" not in problem:
                pytest.fail(f"the holder could not mount a view: {problem}")
            pytest.skip("this process may not mount")
        view = overlay.View(Path(line))
        assert (view.merged / "f").read_text() == "x"
        assert overlay.sweep(base=base) == []  # its owner is alive
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    env = {**os.environ, "DELTARUN_VIEWS": str(base)}
    said = run_cli("gc", "--dry-run", env=env)
    assert said.returncode == 0, said.stderr
    assert f"would unmount workspace view {view.root}" in said.stdout
    assert view.root.exists()
    assert overlay.sweep(base=base) == [f"unmounted workspace view {view.root}"]
    assert not view.root.exists()
    assert str(view.merged) not in Path("/proc/self/mountinfo").read_text()


def test_the_cache_keeps_a_tree_a_live_view_reads(tmp_path: Path) -> None:
    cache = CacheDir(tmp_path / "cache", max_bytes=0)
    tree = cache.path("staged/abc.tree.d")
    tree.mkdir(parents=True)
    (tree / "f").write_text("x" * 1000)
    old = time.time() - 3600
    os.utime(tree, (old, old))
    try:
        view = overlay.mount_view(tree, 1 << 20, 0, 0o755, tmp_path / "views")
    except OSError as exc:
        if IN_CI:
            raise
        pytest.skip(f"this process may not mount: {exc}")
    try:
        assert cache.evict() == []
        assert (view.merged / "f").is_file()
    finally:
        overlay.unmount(view)
    assert cache.evict() == ["staged/abc.tree.d"]
    assert not tree.exists()


def test_a_view_whose_owner_this_host_cannot_judge_is_left(tmp_path: Path) -> None:
    """An owner in another PID namespace (its host identity differs) is never taken for
    dead; one on this host whose process is gone is."""
    from runner.sandbox.labels import host_identity

    dead = subprocess.Popen(["true"])
    dead.wait()
    base = tmp_path / "views"
    for name, host in (("elsewhere", "other-boot/pid:[1]"), ("here", host_identity())):
        root = base / f"{dead.pid}-0-{name}"
        root.mkdir(parents=True)
        (root / "host").write_text(host)
    assert overlay.sweep(base=base) == [f"unmounted workspace view {base / f'{dead.pid}-0-here'}"]
    assert sorted(p.name for p in base.iterdir()) == [f"{dead.pid}-0-elsewhere"]


@pytest.mark.docker
def test_a_reap_scoped_to_one_worker_leaves_live_views(tmp_path: Path, docker_api: Any) -> None:
    """Views carry no worker label: `reap(..., include_live=True, worker=W)` (a test's or an
    operator's teardown of W) must not take another worker's live view; an unscoped
    `gc --all` names it. Dry runs: nothing of anyone else's is touched."""
    from runner.sandbox.reaper import reap

    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "f").write_text("x")
    try:
        view = overlay.mount_view(tree, 1 << 20, 0, 0o755)
    except OSError as exc:
        if IN_CI:
            raise
        pytest.skip(f"this process may not mount: {exc}")
    try:
        named = f"would unmount workspace view {view.root}"
        scoped = reap(docker_api, dry_run=True, include_live=True, worker="nobody-here")
        assert named not in scoped
        assert named in reap(docker_api, dry_run=True, include_live=True)
    finally:
        overlay.unmount(view)
