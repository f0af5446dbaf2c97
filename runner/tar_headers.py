"""tarfile's member headers, checked before tarfile allocates from what they claim.

A tar is a sequence of 512-byte headers; some announce more header to come (a GNU long name
or link, a pax header) that tarfile reads whole, and recursively, before it looks at it.
``CheckedTarInfo`` is the ``tarinfo`` class ``runner.trees.archives`` (and the viewer, for a
session archive) opens a tar with: an extension header over ``MAX_EXTENSION_BYTES``, more
than ``MAX_EXTENSION_CHAIN`` in a row, or a sparse member is ``HeaderRefused`` first.
"""

from __future__ import annotations

import tarfile

MAX_EXTENSION_BYTES = 64 << 10
"""The largest extension header (a GNU long name or link, a pax header) a tar may carry:
tarfile reads one whole before it looks at it, so a header claiming 128 MiB of name would
be 128 MiB of memory (and of error message) from a 127 KiB file."""

MAX_EXTENSION_CHAIN = 8
"""Extension headers in a row before a member: tarfile reads each next one recursively."""

_EXTENSIONS = {
    tarfile.GNUTYPE_LONGNAME: "GNU long name",
    tarfile.GNUTYPE_LONGLINK: "GNU long link",
    tarfile.XHDTYPE: "pax",
    tarfile.XGLTYPE: "pax global",
    tarfile.SOLARIS_XHDTYPE: "pax",
}


class HeaderRefused(Exception):
    """A tar header refused before tarfile acts on it (the reason, without the archive)."""


class CheckedTarInfo(tarfile.TarInfo):
    """tarfile's member header, refusing what would make tarfile allocate from a claim.

    ``_proc_member`` is where tarfile, having read a 512-byte header, goes on to read
    what it announces: an extension header's whole body (then the next header,
    recursively), or a GNU sparse file's extension blocks, 21 sparse entries per 512
    bytes for as long as the (decompressed) stream says so. A pax header with
    ``GNU.sparse`` keys reads its map from the member's data the same way."""

    def _proc_member(self, archive: tarfile.TarFile) -> tarfile.TarInfo:
        if self.type == tarfile.GNUTYPE_SPARSE:
            raise HeaderRefused("a GNU sparse member; only regular files and folders are allowed")
        chain = vars(archive).get("_deltarun_chain", 0)
        if self.type in _EXTENSIONS:
            if self.size > MAX_EXTENSION_BYTES:
                raise HeaderRefused(
                    f"a {_EXTENSIONS[self.type]} header of {self.size} bytes, over the cap of "
                    f"{MAX_EXTENSION_BYTES}"
                )
            if chain >= MAX_EXTENSION_CHAIN:
                raise HeaderRefused(f"more than {MAX_EXTENSION_CHAIN} extension headers in a row")
            vars(archive)["_deltarun_chain"] = chain + 1
        else:
            vars(archive)["_deltarun_chain"] = 0
        found: tarfile.TarInfo = super()._proc_member(archive)  # type: ignore[misc]
        return found

    def _proc_gnusparse_00(self, *_args: object) -> None:
        raise HeaderRefused("a pax sparse member; only regular files and directories are allowed")

    _proc_gnusparse_01 = _proc_gnusparse_10 = _proc_gnusparse_00
