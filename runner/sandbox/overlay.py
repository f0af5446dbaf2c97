"""Copy-free workspaces: a sandbox's ``/workspace`` as a copy-on-write view of a staged tree.

Copying a large fixture into each sandbox (the agent's and the verify sandbox) was most
of a large trial: two full copies of the tree. Where the worker may mount and its engine
sees its mounts (root on the engine's own host: the usual local run, a worker on a
server), a workspace is instead an overlay mount made on the host:

- the lower layer is the fixture's tree staged once per machine
  (``runner.trees.staging.Staging.tree``), shared by every trial of that fixture and
  never written: overlayfs writes only the upper layer (a changed file is copied up
  first, a removed one leaves a whiteout there);
- the upper layer, where every write lands, sits on a tmpfs of its own capped at the
  sandbox's workspace size, and holds the tree's pages as a copy would (``_charge``): for
  each non-empty file a *metacopy* inode (``metacopy=on``: its data is read from the lower
  file at its path) of the file's owner, mode, times and size whose pages are allocated
  and never filled. A write copies the file's data up into that same inode, into pages
  already counted; a removal frees them; a rename follows the lower data
  (``redirect_dir=on``, as a copy renames a directory). So the tmpfs's use is, page for
  page, what a copied workspace's would be after any sequence of writes: the same room,
  the same ``ENOSPC`` at the same write, the same use measured by ``statfs``. What it
  costs: the tree's pages in memory, as a copy, and a few system calls per file (no
  data is copied). Metacopy and redirect xattrs are only ever written by this module
  and the kernel: the agent, without ``CAP_SYS_ADMIN``, can set no ``trusted.*`` xattr
  (and overlayfs stores one set through a view escaped, never as its own). Its root
  has the owner and mode a copied workspace has;
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
import functools
import logging
import os
import secrets
import shutil
import stat
import threading
from collections import OrderedDict
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
# The upper file whose data overlayfs reads from the lower file at its path (metacopy=on).
_METACOPY = "trusted.overlay.metacopy"
# metacopy needs redirect_dir; with it a renamed lower directory keeps its files, as in a copy.
_OPTIONS = "redirect_dir=on,metacopy=on"


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


@functools.cache
def _libc() -> ctypes.CDLL:
    """The C library, found once (``find_library`` runs ``ldconfig -p`` each time)."""
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
    """Mount a view of ``tree`` with the room of a copy of it in a tmpfs of ``size`` bytes
    (the tree's pages are charged there, ``_charge``), whose top directory is owned by
    ``uid`` with ``mode``. Raises OSError when it cannot (ENOSPC: the tree does not fit),
    leaving nothing behind."""
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
        _mount("tmpfs", view.rw, "tmpfs", f"size={size},mode=0700")
        upper, work = view.rw / "upper", view.rw / "work"
        upper.mkdir()
        work.mkdir()
        _charge(str(tree), str(upper))
        os.chown(upper, uid, uid)
        os.chmod(upper, mode)
        options = f"lowerdir={tree},upperdir={upper},workdir={work},{_OPTIONS}"
        _mount("overlay", view.merged, "overlay", options)
    except OSError:
        unmount(view)
        raise
    return view


def _charge(lower: str, upper: str) -> None:
    """Charge the upper layer with the pages a copy of ``lower`` would take: its directories
    as they are (owner, mode, times), and for every non-empty file a metacopy inode with the
    file's size allocated (``posix_fallocate``: counted by the tmpfs, nothing written).

    Why every file: only the kernel can free a file's share of the room at the moment the
    file is removed, and it frees an inode's pages; a single reserve for the tree could not
    follow removals, and no reserve at all would let an agent write past the cap a copy has
    (each is a different patch). Empty files take no page and stay in the lower layer; a
    staged tree holds nothing but directories and regular files, none hard-linked."""
    folders = _listing(lower)
    for path, _, _ in folders[1:]:
        os.mkdir(os.path.join(upper, path), 0o700)
    masked = _umask() | 0o7000  # set-id bits too: chown clears them
    create = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for path, _, files in folders:
        where = os.open(os.path.join(upper, path), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for name, info in files:
                fd = os.open(name, create, stat.S_IMODE(info.st_mode), dir_fd=where)
                try:
                    os.posix_fallocate(fd, 0, info.st_size)
                    os.setxattr(fd, _METACOPY, b"")
                    os.chown(fd, info.st_uid, info.st_gid)
                    if info.st_mode & masked:
                        os.chmod(fd, stat.S_IMODE(info.st_mode))
                    os.utime(fd, ns=(info.st_atime_ns, info.st_mtime_ns))
                finally:
                    os.close(fd)
        finally:
            os.close(where)
    for path, info, _ in reversed(folders[1:]):  # the innermost first: an entry sets its mtime
        target = os.path.join(upper, path)
        os.chown(target, info.st_uid, info.st_gid)
        os.chmod(target, stat.S_IMODE(info.st_mode))
        os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))


# Each directory of a tree (the top first, each before what it holds): its path, its
# attributes and its non-empty files with theirs.
Listing = list[tuple[str, os.stat_result, list[tuple[str, os.stat_result]]]]
_LISTINGS: OrderedDict[tuple[str, int, int], tuple[Listing, int]] = OrderedDict()
# Files kept listed, in all (about 300 bytes each); the last tree listed is kept whatever its size.
_LISTED_FILES = 60_000
_LISTINGS_LOCK = threading.Lock()


def _listing(lower: str) -> Listing:
    """The tree's directories and non-empty files with their attributes; kept for the trees
    used last (a staged tree never changes: its path names its content, and one made again
    is a new directory), so a trial's views need not walk a large tree each time."""
    root = os.stat(lower)
    key = (lower, root.st_dev, root.st_ino)
    with _LISTINGS_LOCK:
        kept = _LISTINGS.get(key)
        if kept is not None:
            _LISTINGS.move_to_end(key)
            return kept[0]
    folders: Listing = []
    pending: list[tuple[str, os.stat_result]] = [("", root)]
    while pending:
        folder, info = pending.pop()
        files: list[tuple[str, os.stat_result]] = []
        with os.scandir(os.path.join(lower, folder)) as entries:
            for entry in entries:
                entry_info = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(entry_info.st_mode):
                    pending.append((os.path.join(folder, entry.name), entry_info))
                elif stat.S_ISREG(entry_info.st_mode) and entry_info.st_size:
                    files.append((entry.name, entry_info))
        folders.append((folder, info, files))
    with _LISTINGS_LOCK:
        _LISTINGS[key] = (folders, sum(len(files) for _, _, files in folders))
        while len(_LISTINGS) > 1 and sum(n for _, n in _LISTINGS.values()) > _LISTED_FILES:
            _LISTINGS.popitem(last=False)
    return folders


def _umask() -> int:
    """This process's umask, read without setting it (``os.umask`` would, for every thread)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o7777  # unknown: set every mode


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
