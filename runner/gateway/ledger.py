"""The gateway's accounting: every request it forwarded, kept whole where the agent's traffic
cannot reach it, written before the answer goes back to the agent.

Why not the container's log: that log is capped and rotates, and the agent decides how much
is written to it (a flood of refused requests with long paths once pushed a billed exchange
out of it). The ledger is a directory of its own (``/ledger`` in the image, a Docker volume
the harness reads, ``runner.sandbox.gateway_container``) holding two files:

    totals.json      rewritten whole (write, then rename) after every request: the sums of
                     every answer forwarded (tokens, tool calls, the distinct model names and
                     tool names, the flags), the refused requests by reason, and the requests
                     still in flight, each at its maximum (``pending``). Its size is bounded
                     whatever the agent sends, so it is always complete. Each version
                     has a later modification time than the last (``_stamp``), so a reader
                     can tell from the file's stat alone whether it changed.
    exchanges.jsonl  one line per request, for the session archive: forwarded requests while
                     it is under ``MAX_LINES_BYTES``, refused ones only the first
                     ``MAX_REFUSED_LINES``, each line bounded (paths cut to ``MAX_PATH_CHARS``).
                     What it leaves out is in the totals (``lines_dropped``).

A request is entered as pending at its maximum before it is forwarded, and settled (its
pending entry replaced by what it used) before its answer is sent on: a proxy killed with
an answer in flight leaves that answer counted at its maximum, and a client gone before its
answer arrived changes nothing. Each line is also printed on stdout (the tests read it
there; the harness does not).

``settle`` decides what an answer counts: what the upstream reported, or, for an answer
the gateway could not read whole (cut, over its cap, unreadable, lost, without its closing
usage), the larger of that and the request's maximum, flagged ``estimated``.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, TextIO

from .wire import MAX_COUNT, MAX_DECODE_BYTES, MAX_JSON_ITEMS, Usage

MAX_LINES_BYTES = 4 << 20
MAX_REFUSED_LINES = 256
MAX_PATH_CHARS = 256
MAX_NAMES = 256  # distinct model and tool names kept in the totals
MAX_FLAG_NAMES = 32
DEFAULT_MAX_OUTPUT_TOKENS = 32_768  # without a route maximum or one in the request
MAX_CHOICES = 128  # the most choices (``n``) a Chat Completions request may ask for
MAX_KEYS = {"max_tokens", "max_output_tokens", "max_completion_tokens", "max_tokens_to_sample"}
CHOICE_KEYS = {"n", "best_of"}
_MAX_KEYS = re.compile(
    rb'"(?:max_tokens|max_output_tokens|max_completion_tokens|max_tokens_to_sample)"'
    rb"\s*:\s*(\d{1,12}(?:\.\d{1,12})?(?:[eE]\+?\d{1,3})?)"
)


@dataclass
class Line:
    """One request as the ledger keeps it (a line of exchanges.jsonl)."""

    path: str
    status: int
    model: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    latency_ms: int = 0
    tool_calls: list[str] = field(default_factory=list)
    budget_exhausted: bool = False
    models: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)


def cut_path(path: str) -> str:
    """A path as the ledger may keep it: at most ``MAX_PATH_CHARS``, query dropped."""
    bare = path.partition("?")[0]
    return bare if len(bare) <= MAX_PATH_CHARS else bare[:MAX_PATH_CHARS] + "..."


def request_maximum(body: bytes | None, max_output: int) -> tuple[int, int]:
    """The most one request can be billed: its input as bytes (a token holds at least one
    byte of the request), its output at the largest ``max_tokens`` / ``max_output_tokens``
    / ``max_completion_tokens`` it names (at any depth, in any spelling JSON allows:
    escaped keys, ``6e4``, ``60000.0``, a key given twice), else ``max_output``, times the
    choices it asks for (``n``). A body too big to decode here is read for those keys as
    written, and its output is at least ``max_output``."""
    data = body or b""
    named: list[float] = []
    choices: list[float] = []
    if _decoded_for_maxima(data, named, choices):
        output = math.ceil(max(named)) if named else max_output
    else:
        found = itertools.islice(_MAX_KEYS.finditer(data), 64)
        output = max([max_output, *(math.ceil(float(m.group(1))) for m in found)])
    many = min(max([1, *choices]), MAX_CHOICES)
    return min(len(data), MAX_COUNT), min(output * math.ceil(many), MAX_COUNT)


def _decoded_for_maxima(data: bytes, named: list[float], choices: list[float]) -> bool:
    """Collect every output maximum and choice count of a JSON body (every pair of every
    object, so a key given twice counts at its larger value); whether it was decoded."""
    items = data.count(b",") + data.count(b":") + data.count(b"[") + data.count(b"{")
    if len(data) > MAX_DECODE_BYTES or items > MAX_JSON_ITEMS:
        return False

    def pairs(found: list[tuple[str, object]]) -> dict[str, object]:
        for key, value in found:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                number = float(value)
                if not math.isfinite(number) or number < 0:
                    number = float(MAX_COUNT) if number > 0 else 0.0
                if key in MAX_KEYS:
                    named.append(min(number, MAX_COUNT))
                elif key in CHOICE_KEYS:
                    choices.append(min(number, MAX_CHOICES))
        return dict(found)

    try:
        json.loads(data, object_pairs_hook=pairs)
    except (ValueError, RecursionError):
        return False  # not JSON (the upstream cannot read it either): read as written
    return True


def settle(
    usage: Usage, maximum: tuple[int, int], *, metered: bool, whole: bool, billed: bool
) -> Usage:
    """What an answer counts. ``whole``: the answer arrived in full and within the cap;
    ``billed``: the request reached the upstream with a 2xx answer or none at all (an
    error status is not billed). A metered answer that was not read whole, or lacks its
    closing usage, counts at least the request's maximum, flagged ``estimated``; one that
    never names its input counts its input at the maximum."""
    reported = usage.input_reported
    complete = whole and usage.final_usage and reported and "unreadable" not in usage.flags
    if not metered or not billed or complete:
        return usage
    prompt = usage.prompt_tokens if reported else max(usage.prompt_tokens, maximum[0])
    prompt = prompt or maximum[0]
    completion = max(usage.completion_tokens, maximum[1])
    flags = [*usage.flags, "estimated"]
    cache_read = min(usage.cache_read_tokens, prompt)
    cache_write = min(usage.cache_write_tokens, prompt - cache_read)
    return Usage(
        usage.model,
        prompt,
        completion,
        cache_read,
        cache_write,
        list(usage.tool_calls),
        list(usage.models),
        flags,
        usage.final_usage,
        usage.secret_seen,
        usage.input_reported,
    )


class Ledger:
    """The accounting of one gateway; safe to share between handler threads."""

    def __init__(self, directory: str | None, stream: TextIO | None = None) -> None:
        self.directory = directory
        self.stream = stream if stream is not None else sys.stdout
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._pending: dict[int, dict[str, Any]] = {}
        self._lines_bytes = 0
        self._refused_lines = 0
        self._stamp = 0  # totals.json's last modification time, in ns
        self.totals: dict[str, Any] = {
            "version": 1,
            "forwarded": 0,
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "cache_read_tokens": 0,
            "cache_write_tokens": 0,
            "tool_calls": 0,
            "tool_names": [],
            "models": [],
            "flags": {},
            "refused": {},
            "budget_refused": 0,
            "lines": 0,
            "lines_dropped": 0,
        }
        if directory is not None:
            with self._lock:
                self._write_totals()

    def begin(self, path: str, maximum: tuple[int, int]) -> int:
        """Enter a request about to be forwarded, at its maximum; its id."""
        with self._lock:
            ident = next(self._ids)
            self._pending[ident] = {
                "path": cut_path(path),
                "prompt_tokens": maximum[0],
                "completion_tokens": maximum[1],
            }
            self._write_totals()
        return ident

    def finish(self, ident: int, line: Line) -> None:
        """Settle a forwarded request: its line replaces its pending entry."""
        line.path = cut_path(line.path)
        totals = self.totals
        with self._lock:
            self._pending.pop(ident, None)
            totals["forwarded"] += 1
            for name in ("prompt_tokens", "completion_tokens", "cache_read_tokens"):
                totals[name] += getattr(line, name)
            totals["cache_write_tokens"] += line.cache_write_tokens
            totals["tool_calls"] += len(line.tool_calls)
            _add_names(totals["tool_names"], line.tool_calls, totals["flags"], "tool_names")
            _add_names(totals["models"], line.models, totals["flags"], "models")
            for flag in line.flags:
                _bump(totals["flags"], flag)
            self._append(line, refused=False)
            self._write_totals()

    def refused(
        self,
        path: str,
        status: int,
        reason: str,
        *,
        budget: bool = False,
        flags: tuple[str, ...] = (),
    ) -> None:
        """Count a request answered here and never forwarded (a bounded line at most)."""
        with self._lock:
            _bump(self.totals["refused"], reason)
            if budget:
                self.totals["budget_refused"] += 1
            line = Line(cut_path(path), status, budget_exhausted=budget, flags=list(flags))
            self._append(line, refused=True)
            self._write_totals()

    def note_rate(self, state: dict[str, object]) -> None:
        """The rate gate's state (permits.py) into the totals, for the harness's relay."""
        with self._lock:
            self.totals["rate"] = state
            self._write_totals()

    def _append(self, line: Line, *, refused: bool) -> None:
        """Print the line, and keep it in exchanges.jsonl while there is room for it."""
        text = json.dumps(asdict(line)) + "\n"
        self.stream.write(text)
        self.stream.flush()
        keep = self._lines_bytes + len(text) <= MAX_LINES_BYTES
        if refused:
            keep = keep and self._refused_lines < MAX_REFUSED_LINES
            self._refused_lines += keep
        if not keep or self.directory is None:
            self.totals["lines_dropped"] += not keep
            return
        with open(os.path.join(self.directory, "exchanges.jsonl"), "a", encoding="utf-8") as out:
            out.write(text)
        self._lines_bytes += len(text)
        self.totals["lines"] += 1

    def _write_totals(self) -> None:
        """Replace totals.json whole (a reader never sees half of it)."""
        if self.directory is None:
            return
        document = {**self.totals, "pending": list(self._pending.values())}
        temporary = os.path.join(self.directory, "totals.json.tmp")
        with open(temporary, "w", encoding="utf-8") as out:
            json.dump(document, out)
        # Two writes within one tick of the file system's clock would share a time: the
        # relay, which rereads the file only when its stat changed, would miss the second.
        self._stamp = max(time.time_ns(), self._stamp + 1)
        os.utime(temporary, ns=(self._stamp, self._stamp))
        os.replace(temporary, os.path.join(self.directory, "totals.json"))


def _add_names(kept: list[str], names: Iterable[str], flags: dict[str, int], what: str) -> None:
    """Add the new names to ``kept`` up to ``MAX_NAMES``; past it, count an overflow."""
    for name in names:
        if name in kept:
            continue
        if len(kept) < MAX_NAMES:
            kept.append(name)
        else:
            _bump(flags, f"{what}_overflow")


def _bump(counts: dict[str, int], key: str) -> None:
    """Count ``key``, among at most ``MAX_FLAG_NAMES`` distinct keys."""
    if key in counts or len(counts) < MAX_FLAG_NAMES:
        counts[key] = counts.get(key, 0) + 1
