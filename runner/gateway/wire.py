"""What a model API's answer says about itself: the model, the token usage, the tool calls.

Three wire formats, each as one JSON body or as server-sent events (SSE):

    Anthropic Messages (``.../messages``): ``usage`` {input_tokens, output_tokens,
        cache_read_input_tokens, cache_creation_input_tokens}; streamed, ``message_start``
        carries the model and the input side and ``message_delta`` the (cumulative) output.
        Tool calls are content blocks of type ``tool_use`` (streamed: ``content_block_start``).
    OpenAI Chat Completions (``.../chat/completions``): ``usage`` {prompt_tokens,
        completion_tokens, prompt_tokens_details.cached_tokens}; streamed, the last chunk's.
        Tool calls are ``choices[].message.tool_calls[].function.name`` (streamed: the
        ``delta.tool_calls`` entries, one call per index).
    OpenAI Responses (``.../responses``): ``usage`` {input_tokens, output_tokens,
        input_tokens_details.cached_tokens}; streamed, ``response.completed``'s. Tool calls are
        output items of a ``*_call`` type (function_call, custom_tool_call, local_shell_call, ...;
        streamed: ``response.output_item.added``/``done``, one call per item).

The counts are made comparable across the APIs: ``prompt_tokens`` is every input token the
model read, cached or not. Anthropic's ``input_tokens`` leaves cache reads and writes out, so
they are added to it; ``cache_read_tokens`` and ``cache_write_tokens`` are parts of
``prompt_tokens`` for every API. OpenAI reports no cache writes (0).

Which fields are read does not depend on the path: every document is searched for each shape,
so an answer is counted whatever path it came back on. Where a stream repeats a count, the
largest valid value wins (Anthropic and Chat streams send cumulative usage, so an honest
stream's last is its largest; a later, smaller report never lowers what was counted).

A key an object gives twice keeps each value for ``model`` and ``usage`` (Python keeps the
last, a client's parser may keep the first): both names are checked, the larger counts kept.

Every model name is kept (``models``, in order of appearance, at most ``MAX_MODELS``
distinct): the value of every ``model`` key at any depth of every document, so that an answer
whose ``message_start`` names one model and a later event another shows both (the harness
holds each to the route lock; ``model`` is the first name, for the log's readers). A ``model`` of
the answer itself (the document, Anthropic's ``message``, a Responses event's ``response``)
that is not text (null, a list, an object) is kept as ``NOT_A_NAME``, which no route pins,
and a name longer than ``MAX_MODEL_CHARS`` is kept cut, ending in ``...``: neither can pass
for the pinned model. (An answer that names no model at all is the proxy's to mark.)

An answer is the upstream's, and anything in it may be malformed: a value that is not a count
(negative, not an integer, over ``MAX_COUNT``) is ignored, a document so big or dense that
decoding it could exhaust the proxy's memory is only scanned for its usage and models, and
nothing here raises. What could not be read whole is named in ``flags``: ``unreadable`` (a
document that looks like JSON and does not decode: bad bytes, nesting too deep), ``scanned``
(read by ``scan``: its tool calls unread), ``models_overflow`` (more distinct model names
than are kept). ``final_usage`` says whether the answer carried its closing usage (not
only the input side an Anthropic ``message_start`` reports) and ``input_reported`` whether
it named its input: an answer cut before its closing usage, or that never names its input,
is counted by the proxy at the request's maximum.

``secret``: when given, every string of every document is searched for it, each field
name's strings joined in order, both over the whole answer and within each part of it (the
object's ``index``, ``output_index``, ``content_index``, ``summary_index``, ``item_id`` and
those of the objects around it: a content block, a choice, an output item), so a key split
over a stream's deltas is found even with another part's deltas between its pieces; past
``MAX_PARTS`` parts the answer counts as carrying it. ``Usage.secret_seen`` says so.
"""

from __future__ import annotations

import collections
import itertools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from .rawstrings import strings

MAX_TOOL_CALLS = 64  # names kept per answer
MAX_NAME_CHARS = 128
MAX_MODEL_CHARS = 128  # as the harness keeps a name (runner.sandbox.gateway_ledger)
NOT_A_NAME = "(not a model name)"
DUPLICATE = "\x00again"  # marks the other values of a key an object gives twice
MAX_MODELS = 16  # distinct model names kept per answer; past it, ``models_overflow``
MAX_SCANNED_MODELS = 4096  # ``model`` keys decoded in a scanned document
MAX_SCANNED_STRINGS = 200_000  # strings of a scanned document followed for the secret
MAX_KEY_CHARS = 256  # of a call's id, as kept to tell calls apart
MAX_PARTS = 4096  # parts of one answer whose strings are joined apart, for the secret
PART_KEYS = ("index", "output_index", "content_index", "summary_index", "item_id")
MAX_COUNT = 10**9  # more tokens than one answer can hold: anything larger is bogus
# A document decoded whole holds its text two or three times over as Python objects, and
# each separator or bracket can become an object of about a hundred bytes: past either bound
# (the proxy has 128 MiB, and the answer itself is in memory too) a document is scanned for
# its usage and model alone (``scan``). Real answers this big are rare: images, huge outputs.
MAX_DECODE_BYTES = 4 << 20
MAX_JSON_ITEMS = 400_000
SCAN_SLICE_BYTES = 64 << 10  # a usage object or a model name, decoded alone, is never longer
ANTHROPIC_BLOCKS = {"tool_use", "server_tool_use", "mcp_tool_use"}

_JSON_START = re.compile(rb"\s*[{\[]")
# A key: an unescaped quote can only open or close a string, so in valid JSON these bytes
# (after "{" or ",") are an object's key, never text inside a string.
_USAGE_KEY = re.compile(rb'[{,]\s*"usage"\s*:\s*')
_MODEL_KEY = re.compile(rb'[{,]\s*"model"\s*:\s*')
_SSE_START = re.compile(rb"\s*(?:data|event|id|retry)?:")


@dataclass
class Usage:
    """What one answer reported; zeros and no model when it said nothing readable."""

    model: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    tool_calls: list[str] = field(default_factory=list)
    models: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    final_usage: bool = False
    secret_seen: bool = False
    input_reported: bool = False


def read_answer(data: bytes | bytearray, content_type: str, secret: str | None = None) -> Usage:
    """The usage of a JSON or SSE answer (by its content type, else by its first bytes)."""
    reader = _Reader(secret)
    for document in documents(data, content_type):
        if isinstance(document, Unread):
            reader.unread(document)
        else:
            reader.document(document)
    return reader.usage()


@dataclass(frozen=True)
class Unread:
    """A document not decoded whole: why (a flag), and what ``scan`` found in it."""

    why: str
    found: dict[str, object]
    text: bytes | bytearray = b""  # the document itself, for the secret's search


def documents(data: bytes | bytearray, content_type: str) -> Iterator[object]:
    """The JSON documents of an answer: the body, or each SSE event's data."""
    kind = content_type.lower()
    sse = "event-stream" in kind or ("json" not in kind and _SSE_START.match(data) is not None)
    if sse:
        for payload in sse_payloads(data):
            if payload.strip() != b"[DONE]":
                yield decode(payload)
    elif "json" in kind or _JSON_START.match(data) is not None:
        yield decode(data)


def sse_payloads(data: bytes | bytearray) -> Iterator[bytes]:
    """Each event's data: its ``data:`` lines joined by newlines (the SSE rules), read
    line by line without copying the whole answer."""
    lines: list[bytes | bytearray] = []
    if data.startswith(b"\xef\xbb\xbf"):  # a byte-order mark, which SSE readers skip
        data = data[3:]
    for line in _lines(data):
        if not line:
            if lines:
                yield b"\n".join(lines)
                lines = []
        elif line.startswith(b"data:"):
            value = line[5:]
            lines.append(value[1:] if value.startswith(b" ") else value)
        elif line == b"data":  # a field with no colon: its value is empty
            lines.append(b"")
    if lines:
        yield b"\n".join(lines)


def _lines(data: bytes | bytearray) -> Iterator[bytes | bytearray]:
    start, end = 0, len(data)
    while start < end:
        newline = data.find(b"\n", start)
        stop = end if newline < 0 else newline
        line = data[start:stop]
        if line.endswith(b"\r"):
            line = line[:-1]
        yield from line.split(b"\r") if b"\r" in line else (line,)
        start = stop + 1


def decode(text: bytes | bytearray) -> object:
    """The JSON value of ``text``; of a document too big or too dense to decode whole, or
    one that looks like JSON and does not decode, an ``Unread`` with what ``scan`` finds."""
    items = text.count(b",") + text.count(b":") + text.count(b"[") + text.count(b"{")
    if len(text) > MAX_DECODE_BYTES or items > MAX_JSON_ITEMS:
        return Unread("scanned", scan(text), text)
    try:
        return json.loads(text, object_pairs_hook=_pairs)
    except (ValueError, RecursionError):  # not JSON, bad UTF-8, huge integers, deep nesting
        if _JSON_START.match(text) is None:
            return None  # not meant as JSON (an SSE comment, a plain-text error)
        return Unread("unreadable", scan(text), text)


def _pairs(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """An object; a ``model`` or ``usage`` key given twice keeps every value (a client's
    parser may keep the first where Python's keeps the last), the others under
    ``<key>`` + ``DUPLICATE`` + their position."""
    document = dict(pairs)
    if len(document) < len(pairs):
        for position, (key, value) in enumerate(pairs):
            if key in ("model", "usage") and value is not document[key]:
                document[f"{key}{DUPLICATE}{position}"] = value
    return document


def scan(text: bytes | bytearray) -> dict[str, object]:
    """``{"usage": ..., "models": [...]}`` of a document not decoded whole: its last
    ``usage`` object and every ``model`` value, each found by its key and decoded alone
    (tool calls are not read)."""
    found: dict[str, object] = {}
    last = collections.deque(_USAGE_KEY.finditer(text), maxlen=1)
    if last:
        found["usage"] = _value_at(text, last[0].end())
    keys = itertools.islice(_MODEL_KEY.finditer(text), MAX_SCANNED_MODELS)
    found["models"] = [_value_at(text, key.end()) for key in keys]
    return found


def _value_at(text: bytes | bytearray, start: int) -> object:
    piece = text[start : start + SCAN_SLICE_BYTES].decode("utf-8", "replace")
    try:
        return json.JSONDecoder().raw_decode(piece)[0]
    except (ValueError, RecursionError):  # cut off by the slice, or not JSON
        return None


def count(value: object) -> int | None:
    """A token count, or ``None`` for anything that is not one."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT:
        return value
    return None


class _Reader:
    """Gathers one answer's documents, in order."""

    def __init__(self, secret: str | None = None) -> None:
        self.models: list[str] = []
        self.flags: list[str] = []
        self.final = False
        self.input_reported = False
        self.input: int = 0
        self.output: int = 0
        self.cache_read: int = 0
        self.cache_write: int = 0
        self.cache_outside_input = False  # Anthropic's way: cache counts beside input_tokens
        self.calls: dict[tuple[object, ...], str] = {}
        self.secret = secret or None
        self.secret_seen = False
        # Per field name, and per (part, field name): the end of its strings so far.
        self.tails: dict[object, str] = {}

    def document(self, document: object) -> None:
        self.walk(document)
        if not isinstance(document, dict):
            return
        # The answer itself, Anthropic's message_start ("message") or a Responses event.
        for envelope in (document, document.get("message"), document.get("response")):
            if isinstance(envelope, dict):
                if "model" in envelope and not isinstance(envelope["model"], str):
                    self.read_model(NOT_A_NAME)
                # message_start's usage is the input side only; the others close the answer.
                final = envelope is not document.get("message")
                for key, usage in envelope.items():
                    if key == "usage" or key.startswith("usage" + DUPLICATE):
                        self.read_usage(usage, final=final)
                self.anthropic_blocks(envelope.get("content"))
                self.chat_choices(envelope.get("choices"))
                self.responses_items(envelope.get("output"))
        self.anthropic_block(document.get("content_block"), document.get("index"))
        self.responses_item(document.get("item"), document.get("output_index"))

    def unread(self, document: Unread) -> None:
        """A document ``scan`` read: its models and usage, flagged."""
        self.flag(document.why)
        models = document.found.get("models")
        for model in models if isinstance(models, list) else ():
            self.read_model(model)
        self.read_usage(document.found.get("usage"), final=True)
        if self.secret is not None:  # its strings, as the walk would join them, by name
            name = ""
            window = 6 * len(self.secret) + 16
            found = strings(document.text, window)
            for number, (is_key, head, tail) in enumerate(found):
                if number >= MAX_SCANNED_STRINGS:  # too many to follow: assume the worst
                    self.secret_seen = True
                    self.flag("parts_overflow")
                    break
                self.search("", (), head)
                if head is not tail:
                    self.search("", (), tail)
                if is_key:
                    name = head[:MAX_KEY_CHARS]
                    continue
                self.search(name, (), head)
                if head is not tail:  # a long string: its end is the field's tail now
                    self.tails[name] = ""
                    self.search(name, (), tail)

    def walk(self, document: object) -> None:
        """Every ``model`` value at any depth, and every string searched for the secret."""
        stack: list[tuple[str, tuple[object, ...], object]] = [("", (), document)]
        while stack:
            name, part, value = stack.pop()
            if isinstance(value, dict):
                if self.secret is not None:
                    part = part + _part(value)
                for key, item in reversed(value.items()):
                    if self.secret is not None:
                        self.search("", part, key)
                    if key == "model" or key.startswith("model" + DUPLICATE):
                        self.read_model(item)
                    stack.append((key, part, item))
            elif isinstance(value, list):
                stack.extend((name, part, item) for item in reversed(value))
            elif isinstance(value, str) and self.secret is not None:
                self.search(name, part, value)

    def search(self, name: str, part: tuple[object, ...], text: str) -> None:
        """Is the secret in this field's strings, joined in order, over the answer and
        within this part of it?"""
        assert self.secret is not None
        keep = len(self.secret) - 1
        # The whole part, and each of its marks alone (a client may join by any one).
        slots = [name, *(((mark,), name) for mark in part), (part, name)] if part else [name]
        for slot in dict.fromkeys(slots):
            joined = self.tails.get(slot, "") + text
            if self.secret in joined:
                self.secret_seen = True
            if slot not in self.tails and len(self.tails) >= MAX_PARTS:
                self.secret_seen = True  # too many parts to follow: assume the worst
                self.flag("parts_overflow")
                continue
            self.tails[slot] = joined[-keep:] if keep else ""

    def flag(self, flag: str) -> None:
        if flag not in self.flags:
            self.flags.append(flag)

    def read_model(self, value: object) -> None:
        if not isinstance(value, str) or not value:
            return
        name = value if len(value) <= MAX_MODEL_CHARS else value[: MAX_MODEL_CHARS - 3] + "..."
        if name in self.models:
            return
        if len(self.models) < MAX_MODELS:
            self.models.append(name)
        else:
            self.flag("models_overflow")

    def read_usage(self, usage: object, *, final: bool) -> None:
        if not isinstance(usage, dict):
            return
        first = ("prompt_tokens", "input_tokens") if "prompt_tokens" in usage else ("input_tokens",)
        for key in first:
            if (value := count(usage.get(key))) is not None:
                self.input = max(self.input, value)
                self.input_reported = True
                break
        for key in ("completion_tokens", "output_tokens"):
            if (value := count(usage.get(key))) is not None:
                self.output = max(self.output, value)
                self.final = self.final or final  # the closing usage names its output
                break
        anthropic = {"cache_read_input_tokens", "cache_creation_input_tokens"} & usage.keys()
        if anthropic and "prompt_tokens" not in usage:
            self.cache_outside_input = True
        cached = [usage.get("cache_read_input_tokens")]
        for details in ("prompt_tokens_details", "input_tokens_details"):
            if isinstance(usage.get(details), dict):
                cached.append(usage[details].get("cached_tokens"))
        for candidate in cached:
            if (value := count(candidate)) is not None:
                self.cache_read = max(self.cache_read, value)
                break
        if (value := count(usage.get("cache_creation_input_tokens"))) is not None:
            self.cache_write = max(self.cache_write, value)

    def anthropic_blocks(self, blocks: object) -> None:
        if isinstance(blocks, list):
            for position, block in enumerate(blocks):
                self.anthropic_block(block, position)

    def anthropic_block(self, block: object, index: object) -> None:
        if isinstance(block, dict) and block.get("type") in ANTHROPIC_BLOCKS:
            self.call(("block", _key(block.get("id"), index)), block.get("name"))

    def chat_choices(self, choices: object) -> None:
        if not isinstance(choices, list):
            return
        for position, choice in enumerate(choices):
            if not isinstance(choice, dict):
                continue
            which = _key(None, choice.get("index", position))
            for part in (choice.get("message"), choice.get("delta")):
                if not isinstance(part, dict):
                    continue
                calls = part.get("tool_calls")
                for number, call in enumerate(calls if isinstance(calls, list) else ()):
                    function = call.get("function") if isinstance(call, dict) else None
                    if isinstance(function, dict):
                        slot = _key(call.get("id"), call.get("index", number))
                        self.call(("chat", which, slot), function.get("name"))
                legacy = part.get("function_call")
                if isinstance(legacy, dict):
                    self.call(("chat", which, "function_call"), legacy.get("name"))

    def responses_items(self, items: object) -> None:
        if isinstance(items, list):
            for position, item in enumerate(items):
                self.responses_item(item, position)

    def responses_item(self, item: object, index: object) -> None:
        if not isinstance(item, dict):
            return
        kind = item.get("type")
        if isinstance(kind, str) and kind.endswith("_call"):
            # A built-in tool's item (local_shell_call, web_search_call) has no name: its type
            # names it. An item with a name that is not text names nothing.
            name = item["name"] if "name" in item else kind[: -len("_call")]
            self.call(("item", _key(item.get("id"), index)), name)

    def call(self, key: tuple[object, ...], name: object) -> None:
        """One tool call's name; the first name seen for a call counts, up to the bound."""
        if not isinstance(name, str) or not name or key in self.calls:
            return
        if len(self.calls) < MAX_TOOL_CALLS:
            self.calls[key] = name[:MAX_NAME_CHARS]

    def usage(self) -> Usage:
        cache_read, cache_write = self.cache_read, self.cache_write
        if self.cache_outside_input:
            prompt = self.input + cache_read + cache_write
        else:  # cached tokens are inside the prompt count: never more than it
            prompt = self.input
            cache_read = min(cache_read, prompt)
            cache_write = min(cache_write, prompt - cache_read)
        return Usage(
            next((m for m in self.models if m != NOT_A_NAME), None),
            prompt,
            self.output,
            cache_read,
            cache_write,
            list(self.calls.values()),
            list(self.models),
            list(self.flags),
            self.final,
            self.secret_seen,
            self.input_reported,
        )


def _part(value: dict[str, object]) -> tuple[object, ...]:
    """What names the part of an answer an object belongs to (its index, item id)."""
    found: list[object] = []
    for key in PART_KEYS:
        item = value.get(key)
        if isinstance(item, str):
            found.append((key, item[:MAX_KEY_CHARS]))
        elif count(item) is not None:
            found.append((key, item))
    return tuple(found)


def _key(identifier: object, index: object) -> object:
    """What tells one call (or choice) from another: its id, else its position."""
    if isinstance(identifier, str) and identifier:
        return identifier[:MAX_KEY_CHARS]
    return index if count(index) is not None else None
