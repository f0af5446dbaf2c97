"""Hostile suite input, and the real command line to feed it to (tests/adversarial/
test_hostile_inputs.py): tar headers written by hand, JSON and YAML built as bytes, the CLI
in this process or in a child under a memory limit."""

from __future__ import annotations

import gzip
import io
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DELTARUN = REPO / ".venv" / "bin" / "deltarun"
MAX_LINE = 400  # what a hostile input's refusal may cost in characters, paths included
MEMORY_LIMIT = 1 << 30  # address space of a child: the whole CLI must fit, whatever it reads
MAX_RSS = 300 << 20  # resident memory of a child, measured: a refusal costs little


def header(name: bytes, typeflag: bytes, size: int) -> bytes:
    """One 512-byte tar header (GNU magic) claiming ``size`` bytes of data."""
    block = bytearray(512)
    block[: len(name)] = name
    block[100:108] = b"0000644\0"
    block[108:116] = b"0000000\0"
    block[116:124] = b"0000000\0"
    if size < 8**11:
        block[124:136] = b"%011o\0" % size
    else:  # GNU base-256 for sizes of 8 GiB and more
        block[124:136] = bytes([0x80]) + size.to_bytes(11, "big")
    block[136:148] = b"00000000000\0"
    block[148:156] = b" " * 8
    block[156:157] = typeflag
    block[257:265] = b"ustar  \0"
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block)


def padded(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % 512)


def claiming_tar(typeflag: bytes, claimed: int, present: int = 127 << 10) -> bytes:
    """A tar whose first header (a GNU long name ``L``, a pax header ``x``, ...) claims
    ``claimed`` bytes of which ``present`` follow, then a regular file."""
    body = b"%d path=" % claimed + b"A" * present if typeflag in b"xg" else b"A" * present
    return header(b"././@LongLink", typeflag, claimed) + padded(body[:present]) + b"\0" * 1024


def gzip_claiming_tar(typeflag: bytes, claimed: int) -> bytes:
    """The measured attack: 128 MiB of claimed name that is really there, gzip'd to ~130 KiB
    (tarfile reads it whole, then quotes it in its error)."""
    stream = io.BytesIO()
    with gzip.GzipFile(fileobj=stream, mode="wb", compresslevel=9, mtime=0) as out:
        out.write(header(b"././@LongLink", typeflag, claimed))
        prefix = b"%d path=" % claimed if typeflag in b"xg" else b""
        out.write(prefix)
        chunk = b"A" * (1 << 20)
        left = claimed - len(prefix)
        while left > 0:
            out.write(chunk[: min(left, len(chunk))])
            left -= len(chunk)
        out.write(b"\0" * (-claimed % 512))
        out.write(header(b"x", b"2", 0) + b"\0" * 1024)  # then a symbolic link: an error
    return stream.getvalue()


def gzip_bomb(sizes: Sequence[int]) -> bytes:
    """A gzip'd tar of regular files of ``sizes`` zero bytes each (whole MiB), as one gzip
    member per MiB of zeros repeated: gigabytes of tar in about a thousandth of that."""
    zeros = gzip.compress(bytes(1 << 20), compresslevel=9, mtime=0)
    parts = []
    for number, size in enumerate(sizes):
        parts.append(gzip.compress(header(b"zeros%d.bin" % number, b"0", size), mtime=0))
        parts += [zeros] * (size >> 20)
    parts.append(gzip.compress(b"\0" * 1024, mtime=0))
    return b"".join(parts)


def nested(depth: int, inner: bytes = b"1") -> bytes:
    return b"[" * depth + inner + b"]" * depth


@dataclass
class Outcome:
    code: int
    stderr: str
    max_rss: int = 0  # bytes; children only


def in_process(*args: str) -> Outcome:
    """``deltarun ARGS`` through the installed entry point's ``main`` in this process (as
    tests/test_cli_errors.py does): an exception that escapes it fails the test."""
    from runner.cli import main

    argv, out, err = sys.argv, io.StringIO(), io.StringIO()
    sys.argv = ["deltarun", *args]
    code = 0
    try:
        with redirect_stdout(out), redirect_stderr(err):
            main()
    except SystemExit as exc:
        code = int(exc.code or 0) if not isinstance(exc.code, str) else 1
    finally:
        sys.argv = argv
    return Outcome(code, err.getvalue())


# A small launcher between the test process and the CLI: it forks (its own few MiB, not the
# test worker's hundreds, which a fork from the worker would count as the child's peak) and
# reports the CLI's exit and peak resident memory as ``wait4`` gives them.
LAUNCHER = r"""
import os, resource, sys
pid = os.fork()
if pid == 0:
    limit = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.execv(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
sys.stdout.write("%d %d\n" % (os.waitstatus_to_exitcode(status), usage.ru_maxrss))
"""


def limited(args: Sequence[str], limit: int = MEMORY_LIMIT, timeout_s: float = 120) -> Outcome:
    """The installed ``deltarun`` in a child whose address space is capped at ``limit``;
    its exit code, stderr and peak resident memory (``wait4``, in ``LAUNCHER``)."""
    with tempfile.TemporaryFile() as err:
        process = subprocess.Popen(
            [sys.executable, "-S", "-c", LAUNCHER, str(limit), str(DELTARUN), *args],
            stdout=subprocess.PIPE,
            stderr=err,
            env={**os.environ, "COLUMNS": "200"},
            start_new_session=True,
        )
        try:
            out, _ = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise TimeoutError(f"deltarun {' '.join(args)} ran over {timeout_s}s") from None
        err.seek(0)
        text = err.read().decode("utf-8", "replace")
    code, maxrss = (int(v) for v in out.split())
    return Outcome(code, text, maxrss * 1024)


def assert_refused(outcome: Outcome, code: int, *needles: str) -> str:
    """Exit ``code``, stderr one line of at most ``MAX_LINE`` characters, no traceback."""
    assert outcome.code == code, (outcome.code, outcome.stderr[-2000:])
    assert "Traceback" not in outcome.stderr, outcome.stderr[-2000:]
    lines = outcome.stderr.splitlines()
    assert len(lines) == 1, outcome.stderr[:2000]
    assert len(lines[0]) <= MAX_LINE, (len(lines[0]), lines[0][:2000])
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]
