"""Bounds on the JSON values that hostile agents and models put into trial records.

An agent's answer, a model's tool-call arguments and its text end up inside a
``Trial``, which the store writes as one JSON line (``model_dump_json``) and
reads back with ``Trial.model_validate_json``.  A value that the writer
accepts but the reader refuses poisons the ledger, and a value that crashes
the parser crashes the run.  This module holds the rule that ties the two
ends together: **a record is accepted by the writer iff its reader accepts
it**, because every value is checked against the same bounds before it is
stored.  Pure: no I/O, no global state.

``loads_bounded``
    Parses untrusted bytes, raising only ``BoundsError``.  Before ``json.loads``
    runs, a scan of the bytes (regular expressions and ``bytes`` methods, so C
    speed) measures the nesting depth, the longest number token and the count
    of values, so the parser never recurses deeply and never converts a huge
    number.
``check_storable``
    Raises ``BoundsError`` when an already parsed Python value would not
    survive the writer and the reader unchanged.
``sanitize``
    Makes a value that we want to keep (a model transcript) storable by
    replacing what cannot be stored.

Why each bound exists (measured with pydantic 2.14 / pydantic-core 2.50):

``max_depth`` (32)
    pydantic-core's JSON parser (jiter) stops at a recursion limit of 200
    nested containers (``[[...[1]...]]`` with 201 levels fails with
    "recursion limit exceeded"; an innermost empty ``[]`` is allowed one more
    level) and its serializer at 255 ("Maximum serialization depth
    exceeded"), so between 201 and 255 levels a record is written but then
    refused by the reader.  ``json.loads`` and naive tree walks recurse once
    per level and raise ``RecursionError`` near 1,000.  The value sits inside
    a record (``Trial.answer`` one level down, a transcript value three), so
    the default stays far below 200 and ``JsonBounds`` refuses more than
    ``MAX_DEPTH_LIMIT`` = 128.
``max_number_chars`` (64)
    ``json.loads`` turns an integer token into an ``int`` with ``int(str)``,
    which refuses more than ``sys.get_int_max_str_digits()`` digits (4300 by
    default) with a ``ValueError``; jiter refuses the same 4300 digits as
    "number out of range", while pydantic's writer happily writes 5000
    digits.  Converting long digit strings is also quadratic.  The cap is
    on the characters of the JSON number token (sign, digits, ``.``,
    exponent) and may not exceed 640, the smallest digit limit Python lets
    a process set (``sys.int_info.str_digits_check_threshold``), nor be
    under 24, the longest ``repr`` of a finite float: a parsed float is
    never refused for its length, only a long token in the input is.
Finite floats only
    RFC 8259 has no NaN or Infinity, yet ``json.loads`` accepts ``NaN``,
    ``Infinity`` and ``-Infinity`` and turns ``1e999`` into ``inf``;
    pydantic's writer turns them into ``null``, so they would not read back
    equal.
No lone surrogates
    ``"\\ud800"`` is legal JSON syntax for a code point that UTF-8 cannot
    encode: ``json.loads`` returns it, pydantic's writer then fails with
    ``UnicodeEncodeError`` and jiter refuses to read it.
``max_bytes`` (1 MiB) and ``max_items`` (100,000)
    Bound the memory and time spent on one untrusted document.  They apply
    to ``loads_bounded`` only: the writer and the reader have no such limit,
    so ``check_storable`` and ``sanitize`` leave sizes to the caller (records
    truncate their own logs and transcripts).
"""

from __future__ import annotations

import json
import math
import re
from array import array
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

MAX_DEPTH_LIMIT = 128
"""The largest ``max_depth`` allowed: well below pydantic-core's parser limit of 200."""

MAX_NUMBER_CHARS_LIMIT = 640
"""The largest ``max_number_chars`` allowed: the smallest ``int`` digit limit Python accepts."""

MIN_NUMBER_CHARS = 24
"""The smallest ``max_number_chars`` allowed: the longest ``repr`` of a finite float
(``-2.2250738585072014e-308``), so no finite float is ever too long."""

_REPR_CHARS = 200
"""How much of ``repr(value)`` ``sanitize`` keeps for a value that is not JSON."""


@dataclass(frozen=True)
class JsonBounds:
    """The limits one JSON value must stay within; see the module docstring for why."""

    max_bytes: int = 1 << 20
    """Largest document ``loads_bounded`` parses, in bytes of UTF-8."""
    max_depth: int = 32
    """Most containers nested inside each other; a scalar has depth 0, ``[]`` depth 1."""
    max_number_chars: int = 64
    """Longest number token, in characters of JSON text (sign, digits, point, exponent)."""
    max_items: int = 100_000
    """Most values in one document, counting containers and scalars, not object keys."""

    def __post_init__(self) -> None:
        if self.max_bytes < 1:
            raise ValueError(f"max_bytes must be at least 1, not {self.max_bytes}")
        if not 1 <= self.max_depth <= MAX_DEPTH_LIMIT:
            raise ValueError(f"max_depth must be 1 to {MAX_DEPTH_LIMIT}, not {self.max_depth}")
        if not MIN_NUMBER_CHARS <= self.max_number_chars <= MAX_NUMBER_CHARS_LIMIT:
            raise ValueError(
                f"max_number_chars must be {MIN_NUMBER_CHARS} to {MAX_NUMBER_CHARS_LIMIT}, "
                f"not {self.max_number_chars}"
            )
        if self.max_items < 1:
            raise ValueError(f"max_items must be at least 1, not {self.max_items}")


class BoundsError(ValueError):
    """A JSON document or value that deltarun refuses; the message is a short reason."""


# A JSON string token, matched on UTF-8 bytes: no byte of a multi-byte character
# is '"' or '\'.  Possessive quantifiers never backtrack, and an unterminated
# string runs to the end of the document (json.loads stops there with an error):
# were it left unmatched, the search would start again at every later quote and
# take quadratic time on '"\"\"\"...'.
_STRING = re.compile(rb'"(?:[^"\\]++|\\[\s\S])*+(?:"|\\?\Z)')
# bytes.translate tables: C-speed passes over the document with strings blanked.
_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"[]{}")
# Openers become the signed byte +1, closers -1 (0xff), for array("b").
_OPEN, _CLOSE = b"\x01", b"\xff"
_BRACKET_STEPS = bytes.maketrans(b"[{]}", _OPEN * 2 + _CLOSE * 2)
_NUMBER_MASK = bytes(ord("0") if c in b"-+.0123456789eE" else ord(" ") for c in range(256))
_JSON_WHITESPACE = b" \t\n\r"
# An escape that may decode to a surrogate: a cheap trigger for the exact check.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_UTF8_BOM = b"\xef\xbb\xbf"


def _depth_error(bounds: JsonBounds) -> BoundsError:
    return BoundsError(f"nested deeper than {bounds.max_depth} levels")


def _number_error(chars: int, bounds: JsonBounds) -> BoundsError:
    return BoundsError(f"a number with {chars} characters (the cap is {bounds.max_number_chars})")


def _scan(data: bytes, bounds: JsonBounds) -> None:
    """Measure depth, number tokens and value count outside strings, before parsing.

    Strings are blanked first, so brackets, commas and digits inside them do not
    count.  Up to the first syntax error these are the tokens ``json.loads``
    sees, so the depth it reaches before it stops is never more than measured.
    Every step is a regular expression or a ``bytes`` method: C speed.
    """
    bare = _STRING.sub(b'""', data)
    # Depth: the maximum running sum of +1 per opener and -1 per closer.  Its peaks
    # sit right after the opener of an innermost pair "[]"; deleting all those pairs
    # first (cheap, and most of a bracket-heavy document) lowers the maximum by one
    # at most, so adding one back is exact for valid JSON, an upper bound otherwise.
    brackets = bare.translate(_BRACKET_STEPS, _NOT_BRACKETS)
    containers = brackets.count(_OPEN)
    inner = brackets.replace(_OPEN + _CLOSE, b"")
    depth = max(accumulate(array("b", inner)), default=0) + (len(inner) < len(brackets))
    if depth > bounds.max_depth:
        raise _depth_error(bounds)
    # Numbers: the first run of more than max_number_chars number characters.
    masked = bare.translate(_NUMBER_MASK)
    start = masked.find(b"0" * (bounds.max_number_chars + 1))
    if start >= 0:
        end = masked.find(b" ", start)
        raise _number_error((len(masked) if end < 0 else end) - start, bounds)
    # Values: in valid JSON a non-empty container of k values holds k - 1 commas.
    compact = bare.translate(None, _JSON_WHITESPACE)
    empty = compact.count(b"[]") + compact.count(b"{}")
    if 1 + bare.count(b",") + containers - empty > bounds.max_items:
        raise BoundsError(f"more than {bounds.max_items} values")


def _reject_constant(name: str) -> Any:
    raise BoundsError(f"{name} is not JSON")


def _finite_float(token: str) -> float:
    number = float(token)
    if not math.isfinite(number):
        raise BoundsError(f"the number {token} is too large for a float")
    return number


def _has_surrogate(value: Any) -> bool:
    """Whether any string or key in a parsed (depth-bounded) value holds a surrogate."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def loads_bounded(data: bytes, bounds: JsonBounds = JsonBounds()) -> Any:
    """Parse one JSON document from untrusted bytes; raise only ``BoundsError``.

    Checks, in order: size, strict UTF-8 (a byte order mark is an error), depth,
    number length and value count (one scan before parsing), then JSON syntax,
    NaN and Infinity, non-finite floats (``1e999``) and lone surrogates
    (``"\\ud800"``).  Duplicate keys keep the last value, as ``json.loads`` does.
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise BoundsError(f"expected bytes, not {type(data).__name__}")
    size = data.nbytes if isinstance(data, memoryview) else len(data)
    if size > bounds.max_bytes:
        raise BoundsError(f"over {bounds.max_bytes} bytes")
    raw = bytes(data)
    if raw.startswith(_UTF8_BOM):
        raise BoundsError("a byte order mark before the JSON")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BoundsError(f"not valid UTF-8 (byte {exc.start})") from None
    _scan(raw, bounds)
    try:
        value = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except BoundsError:
        raise
    except json.JSONDecodeError as exc:
        line = "" if exc.lineno == 1 else f"line {exc.lineno} "
        reason = exc.msg.removesuffix(" at")  # "Invalid control character at"
        raise BoundsError(f"not JSON: {reason} at {line}column {exc.colno}") from None
    except (ValueError, RecursionError) as exc:  # not expected after the scan; never leak
        raise BoundsError(f"not parseable: {type(exc).__name__}") from None
    if _SURROGATE_ESCAPE.search(raw) and _has_surrogate(value):
        raise BoundsError("a lone surrogate in a string")
    return value


def _int_chars(number: int, bounds: JsonBounds) -> int | None:
    """Characters of ``str(number)``, or None when it is surely over the cap.

    Each decimal digit carries under 3.33 bits, so more than 4 bits per allowed
    character means too many digits; below that ``str`` is safe from Python's
    digit limit (the cap is at most 640).
    """
    if number.bit_length() > 4 * bounds.max_number_chars:
        return None
    return len(str(number))


def has_surrogate(text: str) -> bool:
    """Does ``text`` hold a surrogate code point (which no UTF-8 writer accepts)?"""
    return not text.isascii() and _SURROGATE.search(text) is not None


def check_storable(value: Any, bounds: JsonBounds = JsonBounds()) -> None:
    """Raise ``BoundsError`` unless ``value`` survives deltarun's writer and reader unchanged.

    Allowed: ``dict`` with ``str`` keys, ``list``, ``str``, ``int``, ``float``,
    ``bool`` and ``None`` (exact types, not subclasses), nested at most
    ``max_depth`` deep, integers whose ``str`` (the token the writer emits) is
    at most ``max_number_chars`` long, finite floats (a finite float always
    fits), strings and keys without surrogates.  Sizes (``max_bytes``,
    ``max_items``) are not checked: the writer and the reader have no such
    limit.  Iterative, so any depth is refused without recursion.
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        if item is None or kind is bool:
            continue
        if kind is str:
            if not item.isascii() and _SURROGATE.search(item):
                raise BoundsError("a lone surrogate in a string")
        elif kind is int:
            chars = _int_chars(item, bounds)
            if chars is None:
                digits = int(item.bit_length() * math.log10(2)) + 1
                raise BoundsError(
                    f"an integer of about {digits} digits (the cap is "
                    f"{bounds.max_number_chars} characters)"
                )
            if chars > bounds.max_number_chars:
                raise _number_error(chars, bounds)
        elif kind is float:
            if math.isnan(item):
                raise BoundsError("NaN is not JSON")
            if math.isinf(item):
                raise BoundsError(f"{'-' if item < 0 else ''}Infinity is not JSON")
        elif kind is list or kind is dict:
            if depth >= bounds.max_depth:
                raise _depth_error(bounds)
            if kind is list:
                stack.extend((child, depth + 1) for child in item)
                continue
            for key, child in item.items():
                if type(key) is not str:
                    raise BoundsError(f"a key of type {type(key).__name__}; JSON keys are strings")
                if not key.isascii() and _SURROGATE.search(key):
                    raise BoundsError("a lone surrogate in a key")
                stack.append((child, depth + 1))
        else:
            raise BoundsError(f"a value of type {kind.__name__}, which is not JSON")


def _clean_str(text: str) -> str:
    """Join surrogate pairs into the character they encode; lone surrogates become U+FFFD."""
    if text.isascii() or not _SURROGATE.search(text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _clean_int(number: int, bounds: JsonBounds) -> int | str:
    chars = _int_chars(number, bounds)
    if chars is not None and chars <= bounds.max_number_chars:
        return number
    try:
        return str(number)
    except ValueError:  # over Python's int digit limit
        digits = int(number.bit_length() * math.log10(2)) + 1
        return f"<an integer of about {digits} digits>"


def _repr(value: Any) -> str:
    try:
        text = repr(value)
    except Exception as exc:  # a hostile __repr__, or one over a limit
        text = f"<{type(value).__name__}: repr failed with {type(exc).__name__}>"
    return _clean_str(text[:_REPR_CHARS])


def _clean_key(key: Any, bounds: JsonBounds) -> str:
    """A non-str key as ``json.dumps`` would write it, else its ``repr``."""
    if isinstance(key, str):
        return _clean_str(str.__str__(key))
    if key is None or isinstance(key, bool):
        return json.dumps(key)
    if isinstance(key, int):
        return str(_clean_int(int.__int__(key), bounds))
    if isinstance(key, float):
        return repr(float.__float__(key))
    return _repr(key)


def sanitize(value: Any, bounds: JsonBounds = JsonBounds()) -> Any:
    """A copy of ``value`` that ``check_storable`` accepts, keeping what it can.

    Lone surrogates become U+FFFD (surrogate pairs are joined into their
    character), NaN and Infinity become None, integers longer than
    ``max_number_chars`` become their string form (a description past Python's
    digit limit), containers deeper than ``max_depth`` become ``"<deeper than
    N levels>"``, a container inside itself becomes ``"<a cycle>"``, keys
    become strings (``None``, ``True`` as ``json.dumps`` writes them), tuples
    become lists, subclasses of ``str``, ``int`` and ``float`` (enums) become
    their plain value, and anything else its ``repr`` cut to 200 characters.
    Recursion never goes deeper than ``max_depth + 1`` calls.  Shared
    sub-values are copied once per occurrence: the value is treated as a tree.
    """
    return _sanitize(value, 0, bounds, set())


def _sanitize(value: Any, depth: int, bounds: JsonBounds, path: set[int]) -> Any:
    """Sanitize ``value`` found inside ``depth`` containers; ``path`` holds their ids."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _clean_str(str.__str__(value))
    # The base-class methods give the plain value even if a subclass overrides them.
    if isinstance(value, int):
        return _clean_int(int.__int__(value), bounds)
    if isinstance(value, float):
        number = float.__float__(value)
        return number if math.isfinite(number) else None
    if not isinstance(value, dict | list | tuple):
        return _repr(value)
    if depth >= bounds.max_depth:
        return f"<deeper than {bounds.max_depth} levels>"
    if id(value) in path:
        return "<a cycle>"
    path.add(id(value))
    try:
        if isinstance(value, dict):
            return {
                _clean_key(key, bounds): _sanitize(child, depth + 1, bounds, path)
                for key, child in value.items()
            }
        return [_sanitize(child, depth + 1, bounds, path) for child in value]
    finally:
        path.discard(id(value))
