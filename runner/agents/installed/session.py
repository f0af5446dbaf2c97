"""What an installed agent did, kept whole: its session files, its stdout and the gateway's
request log, as one gzip'd tar per trial (``sessions/<sha256>.tar.gz`` in the run
directory, named by the record's ``session_sha256``). Pure.

    stdout.log         what the CLI printed (its stream-JSON or exec JSON events)
    home/<path>        each session file under the agent's HOME (``Kind.session_logs``)
    gateway.jsonl      one line per model request, as the gateway saw it: status, model,
                       tokens (cache read and write among them), latency, tool calls asked
                       for, whether a budget refused it
    cut.txt            present when files were left out to stay within the cap

Everything in it came from the sandbox and is hostile: names are kept only when they are
plain relative paths, contents are bytes that nothing here runs or renders.
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict

from runner.sandbox.base import ModelCall

ARCHIVE_CAP = 2 << 20  # compressed bytes per trial


def session_archive(
    files: Mapping[str, bytes],
    stdout: str,
    calls: Sequence[ModelCall],
    cap: int = ARCHIVE_CAP,
) -> bytes:
    """The trial's session as gzip'd tar bytes within ``cap`` (session files left out,
    largest first, until it fits; the gateway log and stdout are kept, cut if need be)."""
    gateway = "".join(json.dumps(asdict(call), sort_keys=True) + "\n" for call in calls)
    kept = {f"home/{name}": data for name, data in files.items() if _plain(name)}
    cut: list[str] = []
    while True:
        entries = {"gateway.jsonl": gateway.encode(), "stdout.log": stdout.encode(), **kept}
        if cut:
            entries["cut.txt"] = ("left out to stay within the cap:\n" + "\n".join(cut)).encode()
        archive = _gzip_tar(entries)
        if len(archive) <= cap:
            return archive
        if kept:
            largest = max(kept, key=lambda name: (len(kept[name]), name))
            cut.append(f"{largest} ({len(kept.pop(largest))} bytes)")
            continue
        # Nothing left to drop: halve the two logs (only a very large cap breach gets here).
        stdout, gateway = stdout[: len(stdout) // 2], gateway[: len(gateway) // 2]
        cut.append("stdout.log and gateway.jsonl (halved)")


def _plain(name: str) -> bool:
    """A relative path without ``..``, empty or absolute parts (a hostile name is dropped)."""
    parts = name.split("/")
    return bool(name) and not name.startswith("/") and all(p not in ("", ".", "..") for p in parts)


def _gzip_tar(entries: Mapping[str, bytes]) -> bytes:
    """Regular files only, fixed owner, mode and time: the same session gives the same bytes."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name in sorted(entries):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(entries[name]), 0o644, 0
            archive.addfile(info, io.BytesIO(entries[name]))
    return gzip.compress(buffer.getvalue(), compresslevel=6, mtime=0)
