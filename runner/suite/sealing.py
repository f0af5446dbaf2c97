"""``deltarun seal``: resolve what the user pointed at, seal the suite, pin it in controls.

The digest is written into ``controls.yaml`` by a round-trip YAML edit (ruamel.yaml):
the file is parsed, ``suite.sha256`` is set (or added after ``suite.file``), and the
document is written back with the user's comments, key order, quoting, flow or block
style and indentation kept. A file whose pin is already right is not rewritten at all.
"""

from __future__ import annotations

import io
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.constructor import DuplicateKeyError
from ruamel.yaml.error import CommentMark
from ruamel.yaml.error import YAMLError as RuamelYAMLError
from ruamel.yaml.tokens import CommentToken

from runner.atomic import write_atomic
from runner.bounded_input import read_capped
from runner.bounded_json import JsonBounds, loads_bounded
from runner.config.loader import CONTROLS_MAX_BYTES, LoadedControls
from runner.errors import UserError
from runner.hashing import sha256_file
from runner.paths import inside, writable
from runner.suite.load import seal

# Comments, blank lines and directives up to a ``---`` line: ruamel drops what precedes
# the document start, so this part is kept verbatim and only the rest is round-tripped.
_PREAMBLE = re.compile(r"\A(?:[ \t]*(?:#[^\n]*)?\n|%[^\n]*\n)*---[ \t]*(?:#[^\n]*)?\n")

VALIDATION_NAME = "validation.json"  # a suite's validation verdicts, beside tasks.jsonl
VALIDATION_BOUNDS = JsonBounds(max_bytes=64 << 20, max_items=2_000_000)  # 3 fields a task


def _invalid_yaml(source: str, text: str, exc: RuamelYAMLError, line_offset: int) -> UserError:
    """The loader's one-line message for YAML that does not parse (or repeats a key)."""
    mark = getattr(exc, "problem_mark", None)
    line = mark.line + 1 + line_offset if mark is not None else None
    try:
        yaml.safe_load(text)
    except yaml.YAMLError as loader_exc:  # the loader's own reading, line for line
        loader_mark = getattr(loader_exc, "problem_mark", None)
        line = loader_mark.line + 1 if loader_mark is not None else None
    where = f" line {line}" if line is not None else ""
    if isinstance(exc, DuplicateKeyError):
        return UserError(f"{source}:{where}: duplicate key; keep only one")
    return UserError(f"{source}:{where}: not valid YAML; fix the syntax")


def _is_block(node: CommentedMap | CommentedSeq) -> bool:
    return not node.fa.flow_style() and len(node) > 0


def _walk(node: Any) -> Iterator[tuple[CommentedMap, Any, Any]]:
    """Every (block mapping, key, value) pair, depth first in document order."""
    if isinstance(node, CommentedMap):
        for key, value in node.items():
            if _is_block(node):
                yield node, key, value
            yield from _walk(value)
    elif isinstance(node, CommentedSeq):
        for item in node:
            yield from _walk(item)


def _indentation(data: Any, lines: list[str]) -> tuple[int, int, int]:
    """(mapping, sequence, offset) indents as ruamel's ``YAML.indent`` takes them.

    Read from the first nested block mapping and the first block sequence under a key;
    ruamel's defaults (2, 2, 0) where the file has none.
    """
    mapping: int | None = None
    sequence: int | None = None
    offset = 0
    for parent, key, value in _walk(data):
        where = parent.lc.data.get(key)  # None for a key merged in with ``<<``
        if where is None:
            continue
        key_column = where[1]
        if mapping is None and isinstance(value, CommentedMap) and _is_block(value):
            first = value.lc.data.get(next(iter(value)))
            if first is not None and first[1] > key_column:
                mapping = first[1] - key_column
        if sequence is None and isinstance(value, CommentedSeq) and _is_block(value):
            line, column = value.lc.data.get(0, (len(lines), 0))[:2]
            dash = lines[line].rfind("-", 0, column) if line < len(lines) else -1
            if dash >= key_column:
                sequence, offset = column - key_column, dash - key_column
        if mapping is not None and sequence is not None:
            break
    if sequence is None or sequence < offset + 2:
        sequence, offset = 2, 0
    return mapping or 2, sequence, offset


def _insert_after(mapping: CommentedMap, after: Any, key: str, value: str) -> None:
    """Insert ``key`` right after ``after``, keeping the comment lines that followed
    ``after`` below the new key (ruamel stores them on the preceding key)."""
    mapping.insert(list(mapping).index(after) + 1, key, value)
    entry = mapping.ca.items.get(after)
    if not entry or len(entry) < 3 or not isinstance(entry[2], CommentToken):
        return
    token = entry[2]
    head, newline, rest = token.value.partition("\n")
    if not newline or not rest:
        return  # only an end-of-line comment (or nothing): it stays where it is
    mapping.ca.items[key] = [None, None, CommentToken("\n" + rest, CommentMark(0)), None]
    if head.strip():
        token.value = head + "\n"
    else:
        entry[2] = None


_COMMENT = re.compile(r"(?:^|\s)(#.*)\Z")


def _comments(text: str) -> list[str]:
    """Every comment of ``text`` (full-line and end-of-line), sorted; a ``#`` inside a quoted
    string counts too, which is harmless here since it is compared with a rewrite of itself."""
    return sorted(m.group(1).rstrip() for line in text.splitlines() if (m := _COMMENT.search(line)))


@dataclass
class _RoundTrip:
    """A controls file loaded for a rewrite that keeps its comments, order, quoting and
    style: the byte-order mark, line ends and the preamble before the YAML are put back."""

    text: str  # the file with "\n" line ends, its byte-order mark kept
    crlf: bool
    bom: str
    preamble: str
    rt: YAML
    data: Any

    @classmethod
    def load(cls, text: str, source: str) -> _RoundTrip:
        crlf = "\r\n" in text
        text = text.replace("\r\n", "\n")
        bom = "\ufeff" if text.startswith("\ufeff") else ""
        match = _PREAMBLE.match(text[len(bom) :])
        preamble = match.group(0) if match else ""
        body = text[len(bom) + len(preamble) :]
        rt = YAML(typ="rt")
        rt.preserve_quotes = True
        rt.width = sys.maxsize  # never fold a long line
        try:
            data = rt.load(body)
        except RuamelYAMLError as exc:
            raise _invalid_yaml(source, text[len(bom) :], exc, preamble.count("\n")) from exc
        if isinstance(data, CommentedMap):  # the file's own indentation, for the dump
            mapping, sequence, offset = _indentation(data, body.split("\n"))
            rt.indent(mapping=mapping, sequence=sequence, offset=offset)
        return cls(text, crlf, bom, preamble, rt, data)

    def dump(self) -> str:
        """The data as YAML in the file's own indentation, "\n" line ends."""
        buffer = io.StringIO()
        self.rt.dump(self.data, buffer)
        pinned = self.bom + self.preamble + buffer.getvalue()
        return pinned if self.text.endswith("\n") else pinned.rstrip("\n")

    def line_ends(self, pinned: str) -> str:
        return pinned.replace("\n", "\r\n") if self.crlf else pinned


def pin_suite_digest(
    text: str, digest: str, source: str = "controls.yaml", validation: str | None = None
) -> str:
    """Return controls YAML ``text`` with ``suite.sha256`` set to ``digest`` (and
    ``suite.validation`` to ``validation`` when given).

    Returns ``text`` itself when the pin is already ``digest``. Comments, key order,
    quoting and the flow or block style of ``suite`` are kept; ``sha256`` is added after
    ``file`` when absent. Raises a one-line ``UserError`` naming ``source`` when the text
    is not YAML, has no ``suite`` mapping, or cannot be rewritten without losing a
    comment or changing a value.
    """
    doc = _RoundTrip.load(text, source)
    data = doc.data
    suite = data.get("suite") if isinstance(data, CommentedMap) else None
    if not isinstance(suite, CommentedMap):
        raise UserError(
            f"{source}: suite: cannot find where to write the digest; "
            f"add 'suite: {{file: ..., sha256: {digest}}}'"
        )
    if suite.get("sha256") == digest and (
        validation is None or suite.get("validation") == validation
    ):
        return text
    if "sha256" in suite:
        suite["sha256"] = None  # drop the old scalar's quoting: a digest is written plain
        suite["sha256"] = digest
    elif "file" in suite:
        _insert_after(suite, "file", "sha256", digest)
    else:
        suite["sha256"] = digest
    if validation is not None:
        if "validation" in suite:
            suite["validation"] = None
            suite["validation"] = validation
        else:
            _insert_after(suite, "sha256", "validation", validation)
    pinned = doc.dump()
    _check_rewrite(doc.text, pinned, digest, source, validation)
    return doc.line_ends(pinned)


def _check_rewrite(
    text: str, pinned: str, digest: str, source: str, validation: str | None = None
) -> None:
    """Refuse a rewrite that would drop a comment or change anything but the pins."""
    try:
        expected: Any = yaml.safe_load(text)
        expected["suite"]["sha256"] = digest
        if validation is not None:
            expected["suite"]["validation"] = validation
        same = bool(yaml.safe_load(pinned) == expected)
    except (yaml.YAMLError, TypeError, KeyError):
        same = False
    if not same or _comments(pinned) != _comments(text):
        raise UserError(
            f"{source}: suite.sha256: cannot rewrite this file without losing a comment or "
            f"changing a value; set 'sha256: {digest}' under 'suite:' by hand"
        )


def pin_images(text: str, pins: Mapping[str, str], source: str = "controls.yaml") -> str:
    """Return controls YAML ``text`` with ``images.<reference>`` set to each of ``pins``
    (reference -> ``sha256:`` image ID), the mapping added at the end when absent.

    Returns ``text`` itself when every pin is already there. Other pins, comments, key
    order, quoting and style are kept, as ``pin_suite_digest`` keeps them; one
    ``UserError`` line naming ``source`` when ``images`` is not a mapping or the file cannot
    be rewritten without losing a comment or changing another value."""
    doc = _RoundTrip.load(text, source)
    data = doc.data
    if not isinstance(data, CommentedMap):
        raise UserError(f"{source}: must be a YAML mapping with protocol_id, suite and arms")
    images = data.get("images")
    if images is not None and not isinstance(images, CommentedMap):
        raise UserError(f"{source}: images: must map each image reference to sha256:<image ID>")
    if images is not None and all(images.get(ref) == pin for ref, pin in pins.items()):
        return text
    if images is None:
        images = data["images"] = CommentedMap()
    for ref, pin in sorted(pins.items()):
        images[ref] = None  # drop an old scalar's quoting: an ID is written plain
        images[ref] = pin
    pinned = doc.dump()
    try:
        expected: Any = yaml.safe_load(doc.text)
        expected["images"] = {**(expected.get("images") or {}), **pins}
        same = bool(yaml.safe_load(pinned) == expected)
    except (yaml.YAMLError, TypeError, AttributeError):
        same = False
    if not same or _comments(pinned) != _comments(doc.text):
        first = min(pins.items())
        raise UserError(
            f"{source}: images: cannot rewrite this file without losing a comment or changing "
            f"a value; add 'images: {{{first[0]}: {first[1]}}}' (and the other pins) by hand"
        )
    return doc.line_ends(pinned)


def write_controls(path: Path, text: str) -> None:
    """Replace the controls file ``path`` with ``text`` atomically."""
    _write_atomic(path, text)


def _write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically: an interrupted write leaves the old file."""
    where = writable(path.parent, path.name, what="deltarun pins the controls")  # no link
    try:
        write_atomic(where, text.encode("utf-8"))
    except OSError as exc:
        raise UserError(f"{path}: cannot write the controls file ({exc})") from exc


def matching_validation(
    tasks: Path, digest: str, warn: Callable[[str], None] = lambda _line: None
) -> str | None:
    """The SHA-256 of the validation.json beside ``tasks`` when it validated this suite
    digest (``deltarun validate``); None, with a warning for a stale one, otherwise."""
    path = inside(tasks.parent, VALIDATION_NAME, file=tasks, field=VALIDATION_NAME)
    try:
        raw = read_capped(path, VALIDATION_BOUNDS.max_bytes, VALIDATION_NAME)
        data = loads_bounded(raw, VALIDATION_BOUNDS)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, UserError) as exc:  # BoundsError is a ValueError
        warn(f"warning: {path}: unreadable ({exc}); run deltarun validate again")
        return None
    if not isinstance(data, dict) or data.get("suite_sha256") != digest:
        warn(
            f"warning: {path} validated another version of the suite; run deltarun validate "
            "again, then seal the controls to pin it"
        )
        return None
    return sha256_file(path)


def seal_target(
    target: Path,
    load: Callable[[Path], LoadedControls],
    warn: Callable[[str], None] = lambda _line: None,
    strip_top_folder: bool = False,
) -> tuple[str, list[Path]]:
    """Seal a suite directory, a tasks.jsonl, or the suite of a controls.yaml (and pin it);
    ``warn`` gets each warning line (``runner.suite.load.seal``)."""
    strip = strip_top_folder
    if target.is_dir():
        tasks = inside(target, "tasks.jsonl", file=target, field="tasks.jsonl")
        return seal(tasks, warn=warn, strip_top_folder=strip), [tasks]
    if target.suffix in (".yaml", ".yml"):
        writable(target.parent, target.name, what="deltarun seal pins the suite digest")
        loaded = load(target)
        tasks = loaded.suite_path
        digest = seal(tasks, loaded.controls.runtime.archive_caps, warn, strip)
        try:
            text = read_capped(target, CONTROLS_MAX_BYTES, "a controls file").decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UserError(f"{target}: cannot read the controls file ({exc})") from exc
        validation = matching_validation(tasks, digest, warn)
        pinned = pin_suite_digest(text, digest, str(target), validation)
        if pinned != text:
            _write_atomic(target, pinned)
        return digest, [tasks, target]
    if target.is_file():
        return seal(target, warn=warn, strip_top_folder=strip), [target]
    raise UserError(f"{target}: not found; pass a suite directory, tasks.jsonl or controls.yaml")
