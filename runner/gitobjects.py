"""Git's on-disk formats, written without git: objects, a pack and its index, an index file. Pure.

The agent sandbox's baseline is a git directory whose only commit is the workspace
as copied in. Making it inside the sandbox (``git add -A``) hashes and compresses
the whole tree on every trial; for a 100 MB fixture that is most of the trial.
This module writes the same git directory once per fixture instead, as bytes:

- the objects (blobs, trees, one commit) in one pack and its ``.idx`` (version 2),
  undeltified, compressed at zlib level 1;
- an index file (version 2) whose entries carry each file's size, mode and the
  modification time the copy gives it, so a harness git run with
  ``core.checkStat=minimal`` and ``core.trustctime=false`` finds the untouched files
  clean without reading them.

Formats: Documentation/gitformat-pack.txt and gitformat-index.txt in git's sources.
Only what the baseline needs: regular files (mode 100644 or 100755), stage 0,
no extensions; object ids are SHA-1.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass

OBJ_COMMIT, OBJ_TREE, OBJ_BLOB = 1, 2, 3
_KIND_NAMES = {OBJ_COMMIT: b"commit", OBJ_TREE: b"tree", OBJ_BLOB: b"blob"}
COMPRESSION = 1
AUTHOR = b"deltarun <deltarun@localhost> 0 +0000"


@dataclass(frozen=True)
class FileEntry:
    """One regular file of the tree: its path (``/``-separated bytes), bytes and exec bit."""

    path: bytes
    data: bytes
    executable: bool

    @property
    def mode(self) -> int:
        return 0o100755 if self.executable else 0o100644


@dataclass(frozen=True)
class GitObject:
    kind: int
    data: bytes
    oid: bytes  # 20 bytes


def object_of(kind: int, data: bytes) -> GitObject:
    header = _KIND_NAMES[kind] + b" " + str(len(data)).encode() + b"\0"
    return GitObject(kind, data, hashlib.sha1(header + data, usedforsecurity=False).digest())


def refused_path(path: bytes) -> bool:
    """A path git will not keep in an index (an empty, ``.``, ``..`` or ``.git`` component)."""
    return any(part in (b"", b".", b"..") or part.lower() == b".git" for part in path.split(b"/"))


@dataclass(frozen=True)
class Snapshot:
    """The objects of one tree of files: ``tree`` is the root's id, ``oids`` each file's blob."""

    tree: bytes
    objects: list[GitObject]
    oids: dict[bytes, bytes]


class _Dir:
    """A directory while the trees are built: sub-directories and (mode, blob id) files."""

    def __init__(self) -> None:
        self.dirs: dict[bytes, _Dir] = {}
        self.files: dict[bytes, tuple[int, bytes]] = {}


def snapshot(files: Iterable[FileEntry]) -> Snapshot:
    """Every blob and tree object of ``files``; directories come from the paths (an
    archive's members never make one path both a file and a directory)."""
    objects: dict[bytes, GitObject] = {}
    oids: dict[bytes, bytes] = {}
    root = _Dir()
    for entry in files:
        blob = object_of(OBJ_BLOB, entry.data)
        objects.setdefault(blob.oid, blob)
        oids[entry.path] = blob.oid
        *dirs, name = entry.path.split(b"/")
        node = root
        for part in dirs:
            node = node.dirs.setdefault(part, _Dir())
        node.files[name] = (entry.mode, blob.oid)

    def write(node: _Dir) -> bytes:
        # Git orders a tree's entries by name, a directory's name with a slash after it.
        rows = [(name + b"/", b"40000 " + name + b"\0" + write(d)) for name, d in node.dirs.items()]
        rows += [
            (name, b"%o " % mode + name + b"\0" + oid) for name, (mode, oid) in node.files.items()
        ]
        tree = object_of(OBJ_TREE, b"".join(row for _, row in sorted(rows)))
        objects.setdefault(tree.oid, tree)
        return tree.oid

    tree = write(root)
    return Snapshot(tree, list(objects.values()), oids)


def commit_of(tree: bytes, message: bytes = b"baseline\n") -> GitObject:
    """A commit of ``tree`` with no parent, a fixed author and date (deterministic)."""
    body = b"tree " + tree.hex().encode() + b"\nauthor " + AUTHOR + b"\ncommitter " + AUTHOR
    return object_of(OBJ_COMMIT, body + b"\n\n" + message)


class PackWriter:
    """Writes a version-2 pack chunk by chunk and remembers what its index needs."""

    def __init__(self, count: int) -> None:
        self._sha = hashlib.sha1(usedforsecurity=False)
        self._offset = 0
        self.rows: list[tuple[bytes, int, int]] = []  # (oid, crc32, offset)
        self.checksum = b""
        self.header = self._emit(b"PACK" + struct.pack(">II", 2, count))

    def _emit(self, chunk: bytes) -> bytes:
        self._sha.update(chunk)
        self._offset += len(chunk)
        return chunk

    def add(self, obj: GitObject) -> bytes:
        """The packed bytes of one object (a size-and-type header, then zlib data)."""
        size = len(obj.data)
        byte = (obj.kind << 4) | (size & 0x0F)
        size >>= 4
        header = bytearray()
        while size:
            header.append(byte | 0x80)
            byte = size & 0x7F
            size >>= 7
        header.append(byte)
        chunk = bytes(header) + zlib.compress(obj.data, COMPRESSION)
        self.rows.append((obj.oid, zlib.crc32(chunk), self._offset))
        return self._emit(chunk)

    def finish(self) -> bytes:
        """The pack's trailer (the SHA-1 of everything before it)."""
        self.checksum = self._sha.digest()
        return self.checksum

    def index(self) -> bytes:
        """The ``.idx`` (version 2) of the finished pack."""
        rows = sorted(self.rows)
        fanout = [0] * 256
        for oid, _, _ in rows:
            fanout[oid[0]] += 1
        total = 0
        for i in range(256):
            total += fanout[i]
            fanout[i] = total
        small: list[int] = []
        large: list[int] = []
        for _, _, offset in rows:
            if offset < 0x80000000:
                small.append(offset)
            else:
                small.append(0x80000000 | len(large))
                large.append(offset)
        body = b"".join(
            [
                b"\377tOc" + struct.pack(">I", 2),
                struct.pack(">256I", *fanout),
                b"".join(oid for oid, _, _ in rows),
                struct.pack(f">{len(rows)}I", *(crc for _, crc, _ in rows)),
                struct.pack(f">{len(small)}I", *small),
                struct.pack(f">{len(large)}Q", *large),
                self.checksum,
            ]
        )
        return body + hashlib.sha1(body, usedforsecurity=False).digest()


def index_file(files: Iterable[FileEntry], oids: dict[bytes, bytes], uid: int, mtime: int) -> bytes:
    """An index (version 2) of ``files`` as they will be on disk: every entry's size, mode,
    owner and modification time filled in, device, inode and change time zero."""
    rows = sorted(files, key=lambda f: f.path)
    parts = [b"DIRC" + struct.pack(">II", 2, len(rows))]
    for entry in rows:
        oid = oids[entry.path]
        stat = struct.pack(
            ">10I", 0, 0, mtime, 0, 0, 0, entry.mode, uid, uid, len(entry.data) & 0xFFFFFFFF
        )
        flags = struct.pack(">H", min(len(entry.path), 0xFFF))
        row = stat + oid + flags + entry.path
        parts.append(row + b"\0" * (8 - len(row) % 8))
    body = b"".join(parts)
    return body + hashlib.sha1(body, usedforsecurity=False).digest()
