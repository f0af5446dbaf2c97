"""The files the verify sandbox gets from the harness, in its two root-owned layers. Pure.

Layer one comes before the patch is applied: the harness's directory, an empty git
directory whose attributes switch every workspace attribute off, and the screened patch.
Layer two comes after: what decides grading, which the test's uid may not change (see
``runner.grading.verify``'s steps).
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping

from runner.grading.runners import harness_paths
from runner.paths import AGENT_UID
from runner.records import RepoTask
from runner.sandbox_scripts import source
from runner.trees import harness_git
from runner.trees.archives import Entry, Member
from runner.trees.declared import holds_declared
from runner.trees.facts import FixtureView

# The one directory of the harness's that the test's uid owns: where the install step's
# guard leaves its report's copy (``runner.sandbox.guard_run``).
GUARD_REPORTS = "guard-reports"
SCRIPTS = (
    "run_pytest.py",
    "run_unittest.py",
    "run_sympy.py",
    "deltarun_results.py",
    "deltarun_channel.py",
    "guard.py",
    "collector.py",
)


def dirs_of(paths: list[str]) -> list[str]:
    """Every directory above the paths, parents first ("" excluded)."""
    found: dict[str, None] = {}
    for path in paths:
        parts = path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            found.setdefault("/".join(parts[:i]))
    return sorted(found, key=lambda d: (d.count("/"), d))


def layer_one(harness: str, patch: bytes) -> list[Entry]:
    """The harness's root-owned directory (the fixture is already in place)."""
    git = f"{harness}/git"
    entries = [
        Entry(harness, None, 0, 0o755),
        Entry(git, None, 0, 0o755),
        Entry(f"{git}/objects", None, 0, 0o755),
        Entry(f"{git}/refs", None, 0, 0o755),
        Entry(f"{git}/info", None, 0, 0o755),
        Entry(f"{git}/HEAD", b"ref: refs/heads/main\n", 0, 0o444),
        Entry(f"{git}/config", b"[core]\n\trepositoryformatversion = 0\n", 0, 0o444),
        Entry(f"{git}/info/attributes", harness_git.NEUTRAL_ATTRIBUTES.encode(), 0, 0o444),
    ]
    if patch:
        entries.append(Entry(f"{harness}/agent.patch", patch, 0, 0o444))
    return entries


def layer_two(
    task: RepoTask,
    fixture: FixtureView,
    hidden: list[Member],
    harness: str,
    config_name: str,
    config: bytes,
    planted: Mapping[str, bytes],
) -> list[Entry]:
    """What root owns for the test: hidden files, the fixture's files that hold declared
    tests (``planted``: with the canaries written in), their directories, the pristine
    harness files beside them, the runner settings, the launcher, the plugin and the
    collector; and the test's uid's directory for the guard's report copy."""
    hidden_files = [m for m in hidden if not m.is_dir]
    hidden_paths = {m.path for m in hidden_files}
    declared = [
        m
        for path, m in sorted(fixture.pristine.items())
        if path not in hidden_paths and holds_declared(path, harness_paths(task))
    ]
    written = sorted([*declared, *hidden_files], key=lambda m: m.path)
    dirs = dirs_of([m.path for m in written]) + sorted(m.path for m in hidden if m.is_dir)
    pristine = fixture.pristine
    entries = [Entry(d, None, 0, 0o755) for d in dict.fromkeys(dirs)]
    for directory in ["", *dict.fromkeys(dirs)]:
        for name in ("__init__.py", "conftest.py"):
            member = pristine.get(posixpath.join(directory, name))
            if member is not None:
                entries.append(Entry(member.path, member.data, 0, 0o644))
    entries += [
        Entry(m.path, planted.get(m.path, m.data), 0, 0o755 if m.executable else 0o644)
        for m in written
    ]
    entries += [
        Entry(config_name, config, 0, 0o444),
        Entry(f"{harness}/channel", None, 0, 0o755),
        Entry(f"{harness}/pycache", None, 0, 0o555),
        Entry(f"{harness}/{GUARD_REPORTS}", None, AGENT_UID, 0o700),
    ]
    entries += [Entry(f"{harness}/{name}", source(name), 0, 0o444) for name in SCRIPTS]
    return entries


def bytecode_links(harness: str, links: tuple[tuple[str, str], ...]) -> list[Entry]:
    """The image's own bytecode of what the harness's session imports, linked into the
    harness's root-owned pycache prefix (``runner.grading.image_facts``): its directories
    (root's, read-only) and a symbolic link per file, to a file only root can write."""
    prefix = f"{harness}/pycache"
    dirs = dirs_of([link for link, _ in links])
    return [
        *(Entry(f"{prefix}/{d}", None, 0, 0o555) for d in dirs),
        *(Entry(f"{prefix}/{link}", None, 0, 0o777, link=target) for link, target in links),
    ]
