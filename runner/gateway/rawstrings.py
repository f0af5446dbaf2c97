"""The strings of a JSON document too big to decode whole, read from its bytes: each as
its start and its end, decoded, and whether it is an object's key.

``wire.read_answer`` joins each field's strings to find a key split over a stream's
deltas; a document it only scans (too big, too dense, or not valid JSON) would otherwise
break that chain. Only the ends of a long string matter for a split (its inside is
searched in the raw bytes by keyguard.py), so only ``window`` bytes of each end are decoded.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

_QUOTE, _BACKSLASH = ord('"'), ord("\\")


def strings(text: bytes | bytearray, window: int) -> Iterator[tuple[bool, str, str]]:
    """``(is_key, head, tail)`` of every string token of ``text``, in order: the decoded
    first and last ``window`` bytes of it (the same text when it is no longer)."""
    position, end = 0, len(text)
    while True:
        start = text.find(b'"', position)
        if start < 0:
            return
        stop = _closing(text, start + 1, end)
        if stop < 0:
            return  # an unterminated string: the rest is its own
        raw = text[start + 1 : stop]
        after = stop + 1
        while after < end and text[after] in b" \t\r\n":
            after += 1
        is_key = after < end and text[after] == ord(":")
        if len(raw) <= 2 * window:
            head = tail = _decode(raw)
        else:
            head, tail = _decode(raw[:window], cut_end=True), _decode(raw[-window:], cut_start=True)
        yield is_key, head, tail
        position = stop + 1


def _closing(text: bytes | bytearray, position: int, end: int) -> int:
    """Where the string opened before ``position`` closes, or -1."""
    while position < end:
        quote = text.find(b'"', position)
        if quote < 0:
            return -1
        backslashes = 0
        while quote - 1 - backslashes >= position and text[quote - 1 - backslashes] == _BACKSLASH:
            backslashes += 1
        if backslashes % 2 == 0:
            return quote
        position = quote + 1
    return -1


def _decode(raw: bytes | bytearray, *, cut_end: bool = False, cut_start: bool = False) -> str:
    """A piece of a JSON string's inside, decoded; an escape cut by the window is dropped."""
    piece = bytes(raw)
    for _ in range(8):
        try:
            value = json.loads(b'"' + piece + b'"')
            return value if isinstance(value, str) else ""
        except ValueError:
            if cut_end and piece:
                piece = piece[:-1]
            elif cut_start and piece:
                piece = piece[1:]
            else:
                break
    return piece.decode("utf-8", "replace")
