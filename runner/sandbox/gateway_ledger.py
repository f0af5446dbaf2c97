"""The gateway's accounting as the harness reads it: the proxy's ledger directory
(``runner.gateway.ledger``: ``totals.json`` and ``exchanges.jsonl``) read out of its volume,
one ``Exchange`` per request line, plus what the lines do not itemise.

The totals are whole whatever the agent sent; the lines are capped. So the exchanges this
module returns always sum to the totals: when lines were left out (past their cap) an
``Exchange`` for the rest carries the tokens, the model names and tool names no line shows,
and whether a budget refusal was among them (flag ``not_itemised``); a request still in
flight when the proxy stopped (killed, say, with an answer on its way) counts at the
maximum the proxy entered for it before forwarding it (flags ``estimated`` and ``lost``).
"""

from __future__ import annotations

import io
import itertools
import json
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TypeGuard

from runner.errors import SandboxError
from runner.sandbox.base import ModelCall

LEDGER_DIR = "/ledger"
LEDGER_READ_CAP = 8 << 20  # the proxy keeps at most 4 MiB of lines and small totals
MAX_TOOL_CALLS = 64  # names kept per exchange, as the proxy bounds them
MAX_TOOL_NAME = 128
MAX_MODELS = 16  # distinct model names per answer, as the proxy bounds them
MAX_NAMES = 256  # model or tool names of the totals
MAX_FLAGS = 16
COUNTS = ("prompt_tokens", "completion_tokens", "cache_read_tokens", "cache_write_tokens")


@dataclass(frozen=True)
class Exchange:
    """One request the proxy answered (one JSON line of its ledger).

    ``prompt_tokens`` is every input token, cached or not (for Anthropic the proxy adds the
    cache reads and writes it reports beside ``input_tokens``); ``cache_read_tokens`` and
    ``cache_write_tokens`` are parts of it. ``latency_ms`` is the upstream's time to the last
    byte (0 when nothing was forwarded), ``tool_calls`` the names of the tool calls the answer
    asks for, in order (at most 64), ``budget_exhausted`` marks a request the proxy refused
    because the budget was spent, ``models`` every model name the answer gave (``model`` is
    the first) and ``flags`` what the proxy could not take at its word (``estimated``: counted
    at the request's maximum; ``key_reflected``: the key came back and was removed; see
    runner.gateway). Lines of older proxies lack the newer fields: they read as their
    defaults."""

    path: str
    status: int
    model: str | None
    prompt_tokens: int
    completion_tokens: int
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    latency_ms: int = 0
    tool_calls: tuple[str, ...] = ()
    budget_exhausted: bool = False
    models: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()

    def call(self) -> ModelCall:
        """The exchange as the sandbox's agents see it."""
        return ModelCall(
            self.status,
            self.model,
            self.prompt_tokens,
            self.completion_tokens,
            cache_read_tokens=self.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens,
            latency_ms=self.latency_ms,
            tool_calls=self.tool_calls,
            budget_exhausted=self.budget_exhausted,
            models=self.models or ((self.model,) if self.model is not None else ()),
            flags=self.flags,
        )

    @classmethod
    def parse(cls, line: str) -> Exchange | None:
        """The exchange on a log line, or ``None`` for anything else."""
        try:
            data = json.loads(line)
        except ValueError:
            return None
        if not isinstance(data, dict):
            return None
        path, status, model = data.get("path"), data.get("status"), data.get("model")
        prompt, completion = data.get("prompt_tokens"), data.get("completion_tokens")
        if (
            isinstance(path, str)
            and (model is None or isinstance(model, str))
            and _is_int(status)
            and _is_int(prompt)
            and _is_int(completion)
        ):
            return cls(
                path,
                status,
                model,
                prompt,
                completion,
                cache_read_tokens=_count(data.get("cache_read_tokens")),
                cache_write_tokens=_count(data.get("cache_write_tokens")),
                latency_ms=_count(data.get("latency_ms")),
                tool_calls=_names(data.get("tool_calls"), MAX_TOOL_CALLS),
                budget_exhausted=data.get("budget_exhausted") is True,
                models=_names(data.get("models"), MAX_MODELS),
                flags=_names(data.get("flags"), MAX_FLAGS),
            )
        return None


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _count(value: object) -> int:
    """A newer, optional count of a log line: 0 when absent or not a count."""
    return value if _is_int(value) and value >= 0 else 0


def _names(value: object, most: int) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    names = (name[:MAX_TOOL_NAME] for name in value if isinstance(name, str))
    return tuple(itertools.islice(names, most))


def read_ledger(chunks: Iterable[bytes]) -> list[Exchange]:
    """The exchanges of a ledger directory's tar stream (``get_archive`` of ``/ledger``),
    read to ``LEDGER_READ_CAP`` at most; ``SandboxError`` without its totals."""
    data = bytearray()
    for chunk in chunks:
        data += chunk
        if len(data) > LEDGER_READ_CAP:
            raise SandboxError("the model gateway's ledger is over its size")
    files: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(bytes(data)), mode="r:") as archive:
            for member in archive:
                handle = archive.extractfile(member) if member.isreg() else None
                if handle is not None:
                    files[member.name.rpartition("/")[2]] = handle.read()
    except (tarfile.TarError, EOFError) as exc:
        raise SandboxError(f"the model gateway's ledger is unreadable: {exc}") from exc
    try:
        totals = json.loads(files["totals.json"])
    except (KeyError, ValueError) as exc:
        raise SandboxError("the model gateway's ledger has no totals") from exc
    if not isinstance(totals, dict):
        raise SandboxError("the model gateway's ledger has no totals")
    text = files.get("exchanges.jsonl", b"").decode("utf-8", "replace")
    found = (Exchange.parse(line) for line in text.splitlines())
    lines = [exchange for exchange in found if exchange is not None]
    return lines + _rest(lines, totals)


def _rest(lines: list[Exchange], totals: dict[str, Any]) -> list[Exchange]:
    """What the totals hold beyond the lines: the requests left unitemised, and those in
    flight when the proxy stopped."""
    rest: list[Exchange] = []
    missing = [
        max(_count(totals.get(name)) - sum(getattr(e, name) for e in lines), 0) for name in COUNTS
    ]
    seen_models = {model for e in lines for model in e.models or (e.model,)}
    models = tuple(m for m in _names(totals.get("models"), MAX_NAMES) if m not in seen_models)
    seen_tools = {name for e in lines for name in e.tool_calls}
    tools = tuple(n for n in _names(totals.get("tool_names"), MAX_NAMES) if n not in seen_tools)
    budget = _count(totals.get("budget_refused")) > 0 and not any(e.budget_exhausted for e in lines)
    overflow = tuple(
        f for f in ("models_overflow", "tool_names_overflow") if f in (totals.get("flags") or {})
    )
    if any(missing) or models or tools or budget or overflow:
        rest.append(
            Exchange(
                "(requests the ledger's lines leave out)",
                0,
                models[0] if models else None,
                missing[0],
                missing[1],
                cache_read_tokens=missing[2],
                cache_write_tokens=missing[3],
                tool_calls=tools[:MAX_TOOL_CALLS],
                budget_exhausted=budget,
                models=models,
                flags=("not_itemised", *overflow),
            )
        )
    pending = totals.get("pending")
    for entry in pending if isinstance(pending, list) else ():
        if isinstance(entry, dict):
            path = entry.get("path")
            rest.append(
                Exchange(
                    path if isinstance(path, str) else "(in flight)",
                    0,
                    None,
                    _count(entry.get("prompt_tokens")),
                    _count(entry.get("completion_tokens")),
                    flags=("estimated", "lost"),
                )
            )
    return rest
