"""``--instance-tree image``: the repository of an instance image as the image has it (its
working tree: tracked, untracked and ignored files, what the image's set-up built or
edited in place included) made into one commit of a bare repository, from the engine's
tar of the directory, through ``git fast-import``: nothing is written to disk as a file.

Left out: ``.git`` and every ``__pycache__`` directory; devices and fifos; symbolic links,
which a git-tree fixture refuses (``runner.trees.gitfixture``), each named. Regular files
keep their executable bit.
"""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path
from typing import IO

from runner.errors import UserError
from runner.trees.archives import normalise_member_name

_COMMITTER = b"committer deltarun import <import@deltarun.invalid> 0 +0000\n"
_CHUNK = 1 << 20


def commit_tree(
    spool: IO[bytes], bare: Path, ref: str, message: str, where: str
) -> tuple[str, list[str]]:
    """The tar in ``spool`` (one top folder, the repository's) as the commit ``ref`` of
    ``bare``: its id, and the symbolic links left out."""
    env = {
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "LC_ALL": "C",
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    }
    argv = ["git", "--git-dir", str(bare), "fast-import", "--quiet", "--done"]
    with subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env
    ) as git:
        assert git.stdin is not None
        links: list[str] = []
        try:
            _stream(spool, git.stdin, ref, message, where, links)
            git.stdin.close()
        except BrokenPipeError:
            pass
        error = git.stderr.read().decode("utf-8", "replace") if git.stderr else ""
        code = git.wait()
    if code != 0:
        raise UserError(f"{where}: git fast-import failed: {error.strip()[-300:]}")
    done = subprocess.run(
        ["git", "--git-dir", str(bare), "rev-parse", "--verify", ref],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.returncode != 0:
        raise UserError(f"{where}: the commit of the image's tree is missing")
    return done.stdout.strip(), links


def _stream(
    spool: IO[bytes], out: IO[bytes], ref: str, message: str, where: str, links: list[str]
) -> None:
    body = message.encode("utf-8")
    out.write(f"commit {ref}\n".encode() + _COMMITTER + f"data {len(body)}\n".encode() + body)
    out.write(b"\n")
    with tarfile.open(fileobj=spool, mode="r:") as archive:
        for info in archive:
            path = _path(info.name, where)
            if path is None:
                continue
            if info.issym():
                links.append(os.fsdecode(path))
            elif info.isreg() or info.islnk():
                source = archive.extractfile(info)
                if source is None:
                    continue
                mode = b"100755" if info.mode & 0o111 else b"100644"
                out.write(b"M " + mode + b" inline " + _quoted(path) + b"\n")
                if info.islnk():  # a hard link's member has no size of its own
                    data = source.read()
                    out.write(f"data {len(data)}\n".encode() + data + b"\n")
                    continue
                out.write(f"data {info.size}\n".encode())
                while chunk := source.read(_CHUNK):
                    out.write(chunk)
                out.write(b"\n")
    out.write(b"done\n")


def _path(name: str, where: str) -> bytes | None:
    """The member's path below the top folder, or None for what is left out."""
    try:
        normal = normalise_member_name(name)
    except ValueError as exc:
        raise UserError(f"{where}: member {name!r} refused ({exc})") from None
    parts = normal.split("/")[1:]  # the top folder is the repository's own
    if not parts or parts[0] == ".git" or "__pycache__" in parts:
        return None
    return os.fsencode("/".join(parts))


def _quoted(path: bytes) -> bytes:
    """A path as fast-import reads it: C-style quoted."""
    escaped = path.replace(b"\\", b"\\\\").replace(b'"', b'\\"').replace(b"\n", b"\\n")
    return b'"' + escaped + b'"'
