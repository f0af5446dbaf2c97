"""Fixture size: per-trial wall time of a trivial trial on a tiny fixture against a large one.

A large repository (default about 100 MB in 20,000 files, generated) as a tar
fixture and as a git-tree fixture, a one-file fixture the same two ways; each
runs a scripted no-op agent and `true` as the hidden test, -j 1, same machine,
same run. Printed: which workspaces this host gives (copy-free views of the
staged tree, ``runner.sandbox.overlay``, or copies), seconds per trial once
cached and the ratio large/tiny for each kind (goal for git trees <= 1.5), the
same ratio for git trees on the copy path (``DELTARUN_WORKSPACES=copy``), the
first (cold) git trial, the tree cache's hit rate, the bytes a distributed run
moves through Redis for N tasks over one repository (one bundle) against the
bytes tar fixtures would move, and
the peak RSS of a process running 1 and 8 large fixtures (goal within 1.2x).

    python bench/fixtures.py [--mb 100] [--files 20000] [--trials 3] [--smoke]

``--smoke`` (``bench/smoke.py``): 1 MB in 10 files, one cached trial per fixture, and
the peak RSS of 1 and 2 large fixtures.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import smoke  # noqa: E402
from runner.cli import main as _unused_main  # noqa: E402,F401  (imports the package as installed)
from runner.config.loader import load_controls  # noqa: E402
from runner.executors.local import run_local  # noqa: E402
from runner.run.prepare import prepare  # noqa: E402
from runner.sandbox.base import AGENT_UID, WORKSPACE, Limits, SandboxSpec  # noqa: E402
from runner.sandbox.copy_in import unpack_as_agent  # noqa: E402
from runner.sandbox.docker import DockerSandboxFactory  # noqa: E402
from runner.sandbox.engine import connect, image_id  # noqa: E402
from runner.sandbox.view_probe import views_work  # noqa: E402
from runner.suite.sealing import seal_target  # noqa: E402
from runner.trees.archives import ArchiveCaps, build_tar, read_members  # noqa: E402
from runner.trees.cache import CacheDir  # noqa: E402
from runner.trees.inputs import LocalInputs  # noqa: E402
from runner.trees.staging import Staging  # noqa: E402
from runner.trial.env import TrialEnv  # noqa: E402
from runner.trial.execute import execute_trial  # noqa: E402
from tests.helpers import PY_IMAGE, make_suite  # noqa: E402

GIT_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@localhost",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@localhost",
    "GIT_CONFIG_GLOBAL": os.devnull,
}
CAPS = {"max_members": 100_000, "max_member_bytes": "64m", "max_total_bytes": "2g"}


def write_tree(root: Path, mb: int, files: int, salt: str = "") -> None:
    """``files`` files of random text, ``mb`` MB in all, 50 per folder."""
    per_file = max(1, (mb << 20) // max(files, 1))
    for i in range(files):
        path = root / f"pkg{i // 50:04d}" / f"mod{i % 50:02d}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(os.urandom(per_file // 2).hex())
    root.mkdir(parents=True, exist_ok=True)
    (root / "salt.txt").write_text(salt or "tiny")


def tar_of(tree: Path, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w") as archive:
        for path in sorted(tree.rglob("*")):
            archive.add(path, arcname=str(path.relative_to(tree)), recursive=False)


def bundle_of(tree: Path, out: Path) -> str:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(tree), *args], env=GIT_ENV, check=True, capture_output=True, text=True
        ).stdout.strip()

    git("init", "-q", "-b", "main")
    git("add", "-A")
    git("commit", "-q", "-m", "fixture")
    out.parent.mkdir(parents=True, exist_ok=True)
    git("bundle", "create", "-q", str(out), "--all")
    return git("rev-parse", "HEAD")


def task(task_id: str, repo: Any) -> dict[str, Any]:
    return {
        "id": task_id,
        "kind": "ordinary",
        "prompt": "nothing",
        "repo": repo,
        "hidden": f"hidden/{task_id}.tar",
        "hidden_test": "true",
        "image": PY_IMAGE,
        "timeout_s": 120,
    }


def suite_of(root: Path, repos: list[tuple[str, Any]], tars: dict[str, Path]) -> Path:
    """The suite of ``repos``; ``tars`` (fixture path → tree) are written after make_suite,
    which writes a small placeholder at every tar path, and before the seal."""
    controls = make_suite(
        root,
        [task(task_id, repo) for task_id, repo in repos],
        [{"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}}],
        hidden={task_id: {"HIDDEN.txt": "x"} for task_id, _ in repos},
        runtime={"archive": CAPS, "verify_timeout_s": 300},
        seal=False,
    )
    for relative, tree in tars.items():
        tar_of(tree, root / "suite" / relative)
    seal_target(controls, load_controls)
    return controls


def run_trials(controls: Path, out: Path) -> tuple[list[float], LocalInputs, Staging]:
    """Seconds of each trial, in order, -j 1 (the first is the cold one)."""
    client = connect()
    prepared = prepare(controls, out, resume=False, image_digest=lambda i: image_id(client, i))
    factory = DockerSandboxFactory(client)
    inputs = LocalInputs(prepared.suite, prepared.loaded.controls.runtime.archive_caps)
    staging = Staging(CacheDir())
    env = TrialEnv(prepared.loaded.controls, inputs, factory, "bench", staging=staging)
    times: list[float] = []

    def one(job):  # type: ignore[no-untyped-def]
        start = time.perf_counter()
        trial = execute_trial(job, prepared.tasks[job.task_id], prepared.agents[job.arm], env)
        times.append(time.perf_counter() - start)
        return trial

    records: list[Any] = []
    jobs = sorted(prepared.todo, key=lambda j: (j.task_id, j.repeat))
    run_local(jobs, one, records.append, parallel=1, on_interrupt=factory.kill_all)
    failed = [r for r in records if r.error or r.outcome != "success"]
    if failed:
        raise SystemExit(f"bench trials failed: {failed[0].error or failed[0].outcome}")
    return times, inputs, staging


def copy_seconds(tar: Path, times: int) -> float:
    """Seconds to copy the tree of ``tar`` into a fresh sandbox's workspace by the image's
    tar, the floor of what a trial must do twice (agent sandbox, verify sandbox)."""
    caps = ArchiveCaps(max_members=100_000, max_member_bytes=64 << 20, max_total_bytes=2 << 30)
    data = build_tar(read_members(tar, caps), uid=AGENT_UID, gid=AGENT_UID)
    factory = DockerSandboxFactory(connect())
    spec = SandboxSpec(
        image=PY_IMAGE,
        limits=Limits(memory_bytes=2 << 30, nano_cpus=10**9, pids=128, workspace_bytes=1 << 30),
        lifetime_s=300,
        labels={"run": "bench-copy"},
    )
    seconds: list[float] = []
    for _ in range(times):
        with factory.open(spec) as sandbox:
            start = time.perf_counter()
            unpack_as_agent(sandbox, WORKSPACE, data)
            seconds.append(time.perf_counter() - start)
    return _mean(seconds)


def workspaces() -> str:
    """What this host gives: copy-free views, or copies and why (``view_probe``)."""
    client = connect()
    why = views_work(client, image_id(client, PY_IMAGE), None, {"deltarun.deadline": "0"})
    return "copy-free views of the staged tree" if why is None else f"copies ({why})"


def rss_child(work: Path, count: int) -> None:
    """Run ``count`` large tar fixtures in this process; print its peak RSS in MB."""
    controls = work / f"rss{count}" / "controls.yaml"
    run_trials(controls, work / f"rss{count}" / "run")  # fixtures staged on disk, not in memory
    print(json.dumps({"rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--trials", type=int, default=3, help="cached trials per fixture")
    parser.add_argument("--rss-child", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, default=None, help=argparse.SUPPRESS)
    smoke.add_flag(parser)
    args = parser.parse_args()
    if args.rss_child:
        rss_child(args.work, args.rss_child)
        return
    many = 8  # large fixtures in one process, against one
    if args.smoke:
        args.mb, args.files, args.trials, many = 1, 10, 1, 2
        smoke.announce("fixtures", "1 MB in 10 files, 1 cached trial each, 1 and 2 fixtures")
    with tempfile.TemporaryDirectory(prefix="deltarun-bench-") as tmp:
        work = Path(tmp)
        os.environ["DELTARUN_CACHE"] = str(work / "cache")
        print(f"fixtures: workspaces here: {workspaces()}", flush=True)
        print(f"fixtures: generating {args.files} files, {args.mb} MB...", flush=True)
        large, tiny = work / "large", work / "tiny"
        write_tree(large, args.mb, args.files)
        write_tree(tiny, 0, 0)
        results: dict[str, list[float]] = {}
        sizes: dict[str, int] = {}
        for name, tree in (("tiny", tiny), ("large", large)):
            for kind in ("tar", "git"):
                root = work / f"{name}-{kind}"
                suite = root / "suite"
                tars: dict[str, Path] = {}
                if kind == "tar":
                    repo: Any = "fixtures/repo.tar"
                    tars[repo] = tree
                else:
                    commit = bundle_of(tree, suite / "repos" / "repo.bundle")
                    repo = {"git": "repos/repo.bundle", "commit": commit}
                    sizes[f"{name}-git"] = (suite / "repos" / "repo.bundle").stat().st_size
                repos = [(f"r{i}", repo) for i in range(args.trials + 1)]
                controls = suite_of(root, repos, tars)
                if kind == "tar":
                    sizes[f"{name}-tar"] = (suite / "fixtures" / "repo.tar").stat().st_size
                times, inputs, staging = run_trials(controls, root / "run")
                results[f"{name}-{kind}"] = times
                if name == "large" and kind == "git":
                    hits, misses = inputs.store.hits, inputs.store.misses
                    staged = staging.hits, staging.misses
                print(
                    f"fixtures: {name:5} {kind}: cold {times[0]:.2f}s, cached "
                    f"{_mean(times[1:]):.2f}s per trial",
                    flush=True,
                )
        tar_ratio = _mean(results["large-tar"][1:]) / _mean(results["tiny-tar"][1:])
        git_ratio = _mean(results["large-git"][1:]) / _mean(results["tiny-git"][1:])
        print(f"fixtures: large/tiny per trial, tar fixtures: {tar_ratio:.2f}x")
        print(f"fixtures: large/tiny per trial, git trees:    {git_ratio:.2f}x  (goal <= 1.5)")
        os.environ["DELTARUN_WORKSPACES"] = "copy"
        copied = {
            name: run_trials(work / f"{name}-git" / "controls.yaml", work / f"{name}-git-copy")[0]
            for name in ("tiny", "large")
        }
        del os.environ["DELTARUN_WORKSPACES"]
        copy_ratio = _mean(copied["large"][1:]) / _mean(copied["tiny"][1:])
        print(
            f"fixtures: the copy path (DELTARUN_WORKSPACES=copy): git trees, tiny "
            f"{_mean(copied['tiny'][1:]):.2f}s, large {_mean(copied['large'][1:]):.2f}s per "
            f"trial: {copy_ratio:.2f}x; views save "
            f"{_mean(copied['large'][1:]) - _mean(results['large-git'][1:]):.2f}s per large trial"
        )
        copy = copy_seconds(work / "large-tar" / "suite" / "fixtures" / "repo.tar", args.trials)
        print(
            f"fixtures: copying the large tree into a fresh sandbox takes {copy:.2f}s (the "
            f"image's tar, measured now); the copy path does it twice per trial (agent and "
            f"verify sandboxes), a copy-free view never"
        )
        print(
            f"fixtures: first git trial on a cold cache {results['large-git'][0]:.2f}s "
            f"(bundle unpacked and tree written once); tree cache hit rate "
            f"{hits / max(hits + misses, 1):.0%} ({hits} hits, {misses} misses); staged "
            f"workspace and baseline hit rate {staged[0] / max(sum(staged), 1):.0%} "
            f"({staged[0]} hits, {staged[1]} misses)"
        )
        tasks = 1000
        print(
            f"fixtures: {tasks} tasks over one repository move {sizes['large-git'] / 1e6:.1f} MB "
            f"(one bundle) through Redis; tar fixtures would move "
            f"{tasks * sizes['large-tar'] / 1e9:.1f} GB "
            f"({tasks * sizes['large-tar'] / sizes['large-git']:.0f}x)"
        )
        rss = {}
        for count in (1, many):
            root = work / f"rss{count}"
            repos = []
            trees: dict[str, Path] = {}
            for i in range(count):
                tree = work / f"big{i}"
                # A distinct archive each: the large tree plus a file of its own.
                shutil.copytree(large, tree, ignore=shutil.ignore_patterns(".git"))
                (tree / "salt.txt").write_text(f"fixture {i}")
                trees[f"fixtures/big{i}.tar"] = tree
                repos.append((f"big{i}", f"fixtures/big{i}.tar"))
            suite_of(root, repos, trees)
            for tree in trees.values():
                shutil.rmtree(tree)
            child = subprocess.run(
                [sys.executable, __file__, "--rss-child", str(count), "--work", str(work)],
                capture_output=True,
                text=True,
                check=False,
            )
            if child.returncode != 0:
                raise SystemExit(f"rss child failed: {child.stderr[-2000:]}")
            rss[count] = json.loads(child.stdout.strip().splitlines()[-1])["rss_mb"]
        print(
            f"fixtures: peak RSS, 1 large fixture {rss[1]:.0f} MB, {many} large fixtures "
            f"{rss[many]:.0f} MB: {rss[many] / rss[1]:.2f}x  (goal <= 1.2)"
        )


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


if __name__ == "__main__":
    main()
