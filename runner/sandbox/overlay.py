"""Copy-free workspaces: a sandbox's ``/workspace`` as a copy-on-write view of a staged tree.

Copying a large fixture into each sandbox (the agent's and the verify sandbox) was most
of a large trial: two full copies of the tree. Where the worker may mount and its engine
sees its mounts (root on the engine's own host: the usual local run, a worker on a
server), a workspace is instead an overlay mount made on the host:

- the lower layer is the fixture's tree staged once per machine
  (``runner.fixtures.staging.Staging.tree``), shared by every trial of that fixture and
  never written: overlayfs writes only the upper layer (a changed file is copied up
  first, a removed one leaves a whiteout there);
- the upper layer, where every write lands, sits on a tmpfs of its own, capped at the
  sandbox's workspace size less the tree's own footprint, so the agent has the same room
  as in a copied workspace; its root has the owner and mode a copied workspace has;
- the merged directory is bind-mounted at ``/workspace`` (``runner.sandbox.docker``).

A view lives under ``/run/deltarun/views/<pid>-<start>-<random>`` (``DELTARUN_VIEWS`` moves
it), named by its owner's process identity and holding its host identity (boot and PID
namespace, ``runner.sandbox.labels``), so ``sweep`` unmounts what a killed owner on this
host left (``deltarun gc`` and every start-up reaper call it, beside the sandbox reaper)
and never judges an owner whose pids it cannot see.

Elsewhere (a worker in a container that reaches the host's engine, a user without
``CAP_SYS_ADMIN``, another OS) the copy path stays: ``Probe`` finds out once, by a
real sandbox reading a token through a view, so a view the engine would not see is
never used. ``DELTARUN_WORKSPACES=copy`` forces the copy path.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

from runner.sandbox.labels import alive, host_identity, process_identity

log = logging.getLogger(__name__)

DEFAULT_ROOT = "/run/deltarun/views"
_MS_NOSUID, _MS_NODEV = 2, 4
_MNT_DETACH = 2
# Characters that overlayfs's option string cannot carry in a path (lowerdir separators,
# option separators, escapes): such a tree is copied instead.
_UNSAFE = frozenset(",:=\\\n")
# The smallest upper layer a view gets, whatever the tree takes: room for the harness's files.
MIN_UPPER_BYTES = 4 << 20


def views_root() -> Path:
    return Path(os.environ.get("DELTARUN_VIEWS") or DEFAULT_ROOT)


def mode_requested() -> str:
    """``DELTARUN_WORKSPACES``: ``auto`` (views where they work, the default) or ``copy``."""
    return os.environ.get("DELTARUN_WORKSPACES", "auto").strip().lower() or "auto"


@dataclass(frozen=True)
class View:
    """One mounted view: ``merged`` is what the sandbox mounts at ``/workspace``."""

    root: Path

    @property
    def merged(self) -> Path:
        return self.root / "merged"

    @property
    def rw(self) -> Path:
        return self.root / "rw"


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def _mount(source: str, target: Path, fstype: str, data: str) -> None:
    flags = _MS_NOSUID | _MS_NODEV
    done = _libc().mount(
        source.encode(), os.fsencode(target), fstype.encode(), flags, data.encode()
    )
    if done != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {fstype} at {target}: {os.strerror(err)}")


def _umount(target: Path) -> None:
    """Detach a mount (lazily: a process still inside keeps it until it leaves)."""
    if _libc().umount2(os.fsencode(target), _MNT_DETACH) != 0:
        err = ctypes.get_errno()
        if err not in (22, 2):  # EINVAL: not a mount point; ENOENT: gone already
            raise OSError(err, f"umount {target}: {os.strerror(err)}")


def usable_tree(tree: Path) -> bool:
    """A tree overlayfs can take as its lower layer by this path."""
    text = str(tree)
    return tree.is_absolute() and not (_UNSAFE & set(text)) and tree.is_dir()


def mount_view(tree: Path, size: int, uid: int, mode: int, base: Path | None = None) -> View:
    """Mount a view of ``tree``: writes land on a tmpfs of ``size`` bytes whose top directory
    is owned by ``uid`` with ``mode``. Raises OSError when it cannot (nothing left behind)."""
    if not usable_tree(tree):
        raise OSError(f"{tree} cannot be an overlay's lower layer")
    base = base or views_root()
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    pid = process_identity(os.getpid()).replace(":", "-")
    view = View(base / f"{pid}-{secrets.token_hex(6)}")
    view.root.mkdir(mode=0o700)
    try:
        (view.root / "host").write_text(host_identity(), encoding="utf-8")
        view.rw.mkdir()
        view.merged.mkdir()
        _mount("tmpfs", view.rw, "tmpfs", f"size={max(size, MIN_UPPER_BYTES)},mode=0700")
        upper, work = view.rw / "upper", view.rw / "work"
        upper.mkdir()
        work.mkdir()
        os.chown(upper, uid, uid)
        os.chmod(upper, mode)
        options = f"lowerdir={tree},upperdir={upper},workdir={work}"
        _mount("overlay", view.merged, "overlay", options)
    except OSError:
        unmount(view)
        raise
    return view


def unmount(view: View) -> None:
    """Unmount a view and remove its directories; never raises (``sweep`` retries)."""
    for target in (view.merged, view.rw):
        try:
            _umount(target)
        except OSError as exc:
            log.warning("could not unmount %s: %s", target, exc)
            return
    shutil.rmtree(view.root, ignore_errors=True)


def _same_host(root: Path) -> bool:
    """Whether the view's owner shares this process's boot and PID namespace."""
    try:
        return (root / "host").read_text(encoding="utf-8") == host_identity()
    except OSError:
        return False


def sweep(dry_run: bool = False, base: Path | None = None, include_live: bool = False) -> list[str]:
    """Unmount the views whose owning process is gone (a killed worker or run), or all of
    them (``include_live``: ``gc --all``); what was done."""
    base = base or views_root()
    lines: list[str] = []
    try:
        entries = sorted(base.iterdir())
    except OSError:
        return lines
    for entry in entries:
        pid, _, rest = entry.name.partition("-")
        start = rest.partition("-")[0]
        if not pid.isdigit() or not _same_host(entry):
            continue  # a probe's tree, or an owner whose pids this process does not see
        if alive(f"{pid}:{start}") and not include_live:
            continue
        lines.append(f"{'would unmount' if dry_run else 'unmounted'} workspace view {entry}")
        if not dry_run:
            unmount(View(entry))
    return lines
