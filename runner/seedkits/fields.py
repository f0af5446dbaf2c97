"""Reading the seeds' files and fields: every problem is one line naming the file, the
field and the fix (``UserError``, exit 1); nothing else escapes.

A ``Fields`` is one mapping of a seed file (the YAML document, a section of it, or a
task line) with where it came from, so each getter can name ``FILE: section.key``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from difflib import get_close_matches
from pathlib import Path
from typing import Any

import yaml

from runner.bounded_input import YamlBounds, load_yaml, read_capped, yaml_refusal
from runner.bounded_json import BoundsError, loads_bounded
from runner.errors import DigestMismatch, UserError
from runner.hashing import sha256_bytes
from runner.suite.lines import LINE_BOUNDS

Warn = Callable[[str], None]
SEED_FILE_MAX_BYTES = 128 << 20  # a seed's tasks, protocol or answers file (as tasks.jsonl)

# A value the seeds write to be filled in later: REPLACE_AFTER_HASHING, REPLACE_WITH_HASH,
# FROM_ENDPOINT_NOT_FROM_A_BLOG.
PLACEHOLDER_RE = re.compile(r"\A[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\Z")
SHA256_RE = re.compile(r"\A[0-9a-f]{64}\Z")


def is_placeholder(value: object) -> bool:
    return isinstance(value, str) and bool(PLACEHOLDER_RE.match(value))


def read_bytes(path: Path, what: str) -> bytes:
    """The bytes of a seed file; one line naming it when it is missing or unreadable."""
    if not path.is_file():
        raise UserError(f"{path}: not found; {what}")
    try:
        return read_capped(path, SEED_FILE_MAX_BYTES, "a seed file")
    except OSError as exc:
        raise UserError(f"{path}: cannot be read ({exc.strerror})") from exc


def read_text(path: Path, what: str) -> str:
    data = read_bytes(path, what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text (byte {exc.start}); save it as UTF-8") from exc


def read_yaml_mapping(path: Path, what: str) -> Fields:
    """A YAML file whose document is a mapping."""
    text = read_text(path, what)
    try:
        data = load_yaml(text, YamlBounds(max_chars=SEED_FILE_MAX_BYTES))
    except yaml.YAMLError as exc:
        raise UserError(yaml_refusal(str(path), exc)) from exc
    except BoundsError as exc:
        raise UserError(f"{path}: refused: {exc}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: must be a YAML mapping of fields ({what})")
    return Fields(data, str(path))


def read_jsonl(path: Path, what: str) -> list[Fields]:
    """One ``Fields`` per non-blank line, each naming ``FILE:LINE``."""
    rows = []
    for number, raw in enumerate(read_text(path, what).split("\n"), 1):  # JSON Lines: \n only
        line = raw.removesuffix("\r")
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            data = loads_bounded(line.encode("utf-8", "surrogatepass"), LINE_BOUNDS)
        except BoundsError as exc:
            reason = str(exc).removeprefix("not JSON: ")
            raise UserError(
                f"{where}: not valid JSON ({reason}); write one object per line"
            ) from None
        if not isinstance(data, dict):
            raise UserError(f"{where}: not a JSON object; write one task object per line")
        rows.append(Fields(data, where))
    if not rows:
        raise UserError(f"{path}: no task lines; {what}")
    return rows


class Fields:
    """One mapping of a seed file: typed getters that name the field when it is wrong."""

    def __init__(self, data: dict[Any, Any], where: str, prefix: str = "") -> None:
        self.data = data
        self.where = where
        self.prefix = prefix

    def name(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def fail(self, key: str, problem: str) -> UserError:
        return UserError(f"{self.where}: {self.name(key)}: {problem}")

    def check_keys(self, known: Sequence[str], format_name: str) -> None:
        """Every key is one of ``known``: a misspelt or foreign key is one line."""
        for key in self.data:
            if key in known:
                continue
            close = get_close_matches(str(key), list(known), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise self.fail(
                str(key),
                f"not a field of {format_name}; {hint}its fields are {', '.join(known)}",
            )

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def get(self, key: str) -> Any:
        return self.data.get(key)

    def text(self, key: str, required: bool = False) -> str | None:
        value = self.data.get(key)
        if value is None:
            if required:
                raise self.fail(key, "missing; it is required")
            return None
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise self.fail(key, f"must be a string, not {_kind(value)}")
        text = str(value).strip()
        if not text:
            raise self.fail(key, "is empty")
        return text

    def number(self, key: str, minimum: float | None = None) -> float | None:
        """A number (above ``minimum`` when given), or None when absent."""
        value = self.data.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(key, f"must be a number, not {_kind(value)}")
        if minimum is not None and not value > minimum:
            raise self.fail(key, f"must be more than {minimum:g}, not {value:g}")
        return float(value)

    def integer(self, key: str, minimum: int | None = None) -> int | None:
        value = self.data.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, f"must be a whole number, not {_kind(value)}")
        if minimum is not None and value < minimum:
            raise self.fail(key, f"must be at least {minimum}, not {value}")
        return value

    def boolean(self, key: str) -> bool | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, bool):
            raise self.fail(key, f"must be true or false, not {_kind(value)}")
        return value

    def strings(self, key: str) -> list[str] | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.fail(key, "must be a list of non-empty strings")
        return list(value)

    def section(self, key: str, required: bool = False) -> Fields | None:
        value = self.data.get(key)
        if value is None:
            if required:
                raise self.fail(key, "missing; it is required")
            return None
        if not isinstance(value, dict):
            raise self.fail(key, f"must be a mapping, not {_kind(value)}")
        return Fields(value, self.where, self.name(key))


def check_digest(
    fields: Fields, key: str, data: bytes, path: Path, warn: Warn, fix: str
) -> str | None:
    """The seed's pin of ``path``'s bytes: checked when filled in (exit 3 on a mismatch, as
    the seed's own harness stops); a placeholder or no pin is a warning. The pin, if any."""
    actual = sha256_bytes(data)
    pinned = fields.text(key)
    if pinned is None or is_placeholder(pinned):
        state = "is missing" if pinned is None else f"is the placeholder {pinned}"
        warn(
            f"warning: {fields.where}: {fields.name(key)} {state}: {path.name} was not pinned "
            f"by the seed (its bytes have sha256 {actual}); `deltarun seal` pins the imported "
            "suite"
        )
        return None
    if not SHA256_RE.match(pinned.lower()):
        raise fields.fail(key, f"must be 64 hex digits (the SHA-256 of {path.name}); {fix}")
    if pinned.lower() != actual:
        raise DigestMismatch(
            f"{fields.where}: {fields.name(key)}: digest mismatch: the seed pins {pinned}, "
            f"{path} has {actual}; restore the file or re-pin it (a new suite version)"
        )
    return actual


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, int | float):
        return "a number"
    return type(value).__name__
