"""The decompressed bytes of a gzip file, read as a stream by zlib in C.

Python's ``gzip`` module (and tarfile's ``r:gz`` and ``r|gz``, built on it) reads each
member's header one byte at a time while it looks for the end of a file name or comment:
a hostile archive of hundreds of megabytes of "name" costs about a minute before the first
byte is decompressed. zlib parses the gzip header itself (``wbits`` 16 + 15), so a header
of any length is passed over at C speed; every member of a multi-member file is read in
turn, zero padding after the last is allowed (as ``gzip`` allows it), and no call returns
more than ``CHUNK`` bytes however much one compressed byte claims.
"""

from __future__ import annotations

import io
import zlib
from typing import BinaryIO

CHUNK = 1 << 16
_GZIP_WBITS = 16 + zlib.MAX_WBITS


class GunzipReader(io.RawIOBase):
    """A readable stream of the decompressed bytes of the gzip stream ``raw``; a stream that
    ends mid-member raises ``EOFError``, bytes that are not gzip ``zlib.error``."""

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self._z = zlib.decompressobj(_GZIP_WBITS)
        self._out = b""
        self._started = False  # a member began: its end is required

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self._out:
            if not self._fill():
                return 0
        size = min(len(buffer), len(self._out))
        buffer[:size] = self._out[:size]
        self._out = self._out[size:]
        return size

    def _fill(self) -> bool:
        """Decompress at most ``CHUNK`` more bytes into ``_out``; False at the end."""
        if self._z.eof:
            rest = (self._z.unused_data or self._raw.read(CHUNK)).lstrip(b"\0")
            while not rest:  # zero padding after a member, as gzip allows it
                rest = self._raw.read(CHUNK)
                if not rest:
                    return False
                rest = rest.lstrip(b"\0")
            self._z = zlib.decompressobj(_GZIP_WBITS)
            data = rest
        elif self._z.unconsumed_tail:
            data = self._z.unconsumed_tail
        else:
            data = self._raw.read(CHUNK)
            if not data:
                if self._started or self._z.unused_data:
                    raise EOFError(
                        "Compressed file ended before the end-of-stream marker was reached"
                    )
                return False
        self._started = True
        self._out = self._z.decompress(data, CHUNK)
        return True
