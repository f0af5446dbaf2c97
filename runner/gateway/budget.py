"""The trial's budget: how much the proxy forwards before it stops, and how it says no.

Configuration (environment, each optional; the harness sets them):
    DELTARUN_BUDGET_TOKENS  input plus output tokens of the trial, as logged (``prompt_tokens``
                            + ``completion_tokens``: cached input tokens count, see wire.py)
    DELTARUN_BUDGET_USD     dollars of the trial, priced with DELTARUN_PRICE
    DELTARUN_PRICE          JSON {"input", "output", "cache_read", "cache_write"}: dollars per
                            million tokens; input and output required, a cache price absent is 0.
                            Required with DELTARUN_BUDGET_USD.

Spend is the sum over the answers so far, whatever their status. Dollars are computed from the
summed counts: ``(prompt - cache_read - cache_write) × input + cache_read × cache_read +
cache_write × cache_write + completion × output``, per million; the same sum from the logged
counts gives the same figure. Once spend reaches a budget, no request is forwarded any more. A
request already on its way finishes and counts, so an agent that asks several at once can pass
the budget by what those use; the one after them is refused.

The run's budget (``budget.run_usd``, one for every trial of the run on every machine) is
not kept here: the harness's relay on the worker (runner.sandbox.gateway_relay) debits this
gateway's spend to the run's account and, once the run's dollars are spent, writes the file
``RUN_SPENT_FILE`` into the ledger's directory (a volume only the proxy and the engine reach).
From then on every request is refused like a spent trial budget, naming the run's budget.
Nothing the agent sends can remove that file or reach the account.

A refusal is answered in the shape of the request's API, with ``x-should-retry: false`` (the
official OpenAI and Anthropic SDKs obey it before their status rules), and its text carries no
number and no "rate limit" wording (litellm reads those as a rate limit, which it retries). The
status is the one each API's clients treat as final:

    Anthropic Messages   400 ``invalid_request_error``: what the Anthropic API answers when the
                         credit is spent; Claude Code and the SDK do not retry a 400 (a 429
                         both retry).
    OpenAI Responses     400 ``insufficient_quota``: Codex maps a 400 to an invalid request and
                         stops; any other 4xx but 429 it retries (5 times), and a 429 may be
                         retried by its transport first.
    Chat Completions     402 ``insufficient_quota`` (also any other path): litellm turns a 402 into
                         ``APIError``, which mini-swe-agent never retries; aider retries it with
                         backoff for about a minute, then stops. A 400 (``BadRequestError``)
                         or a 429 (``RateLimitError``) mini-swe-agent retries 10 times, over
                         about six minutes.
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass

ANTHROPIC = "anthropic"  # the API names of wire.api_of
RESPONSES = "responses"
PRICE_KEYS = ("input", "output", "cache_read", "cache_write")
RUN_SPENT_FILE = "run-budget-spent"  # in the ledger's directory: the run's budget is spent
RUN = "run"  # ``refusal``'s name of the run's dollar budget


@dataclass(frozen=True)
class Price:
    """Dollars per million tokens."""

    input: float
    output: float
    cache_read: float = 0.0
    cache_write: float = 0.0

    @classmethod
    def parse(cls, text: str) -> Price:
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise ValueError("DELTARUN_PRICE is not JSON") from exc
        if not isinstance(value, dict) or not {"input", "output"} <= value.keys():
            raise ValueError("DELTARUN_PRICE must be an object with input and output")
        unknown = sorted(set(value) - set(PRICE_KEYS))
        if unknown:
            raise ValueError(f"DELTARUN_PRICE has unknown keys {unknown}")
        prices = {}
        for key, price in value.items():
            if not isinstance(price, (int, float)):  # a JSON number, not a string
                raise ValueError(f"DELTARUN_PRICE.{key} must be a number")
            prices[key] = _amount(f"DELTARUN_PRICE.{key}", price)
        return cls(**prices)

    def dollars(self, prompt: int, completion: int, cache_read: int, cache_write: int) -> float:
        fresh = max(prompt - cache_read - cache_write, 0)
        return (
            fresh * self.input
            + cache_read * self.cache_read
            + cache_write * self.cache_write
            + completion * self.output
        ) / 1e6


class Budget:
    """The trial's limits and its spend so far; safe to share between handler threads."""

    def __init__(self, tokens: int | None, usd: float | None, price: Price | None) -> None:
        if usd is not None and price is None:
            raise ValueError("DELTARUN_BUDGET_USD needs DELTARUN_PRICE")
        self.tokens, self.usd, self.price = tokens, usd, price
        self._lock = threading.Lock()
        self._spent = [0, 0, 0, 0]  # prompt, completion, cache read, cache write

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Budget:
        tokens_text = env.get("DELTARUN_BUDGET_TOKENS") or None
        usd_text = env.get("DELTARUN_BUDGET_USD") or None
        price_text = env.get("DELTARUN_PRICE") or None
        tokens = None
        if tokens_text is not None:
            try:
                tokens = int(tokens_text)
            except ValueError:
                tokens = -1
            if tokens < 0:
                raise ValueError("DELTARUN_BUDGET_TOKENS must be a whole number, 0 or more")
        usd = None if usd_text is None else _amount("DELTARUN_BUDGET_USD", usd_text)
        price = None if price_text is None else Price.parse(price_text)
        return cls(tokens, usd, price)

    def describe(self) -> str:
        parts = [f"{self.tokens} tokens"] if self.tokens is not None else []
        parts += [f"{self.usd:g} USD"] if self.usd is not None else []
        return ", budget " + " and ".join(parts) if parts else ""

    def spend(self, prompt: int, completion: int, cache_read: int, cache_write: int) -> None:
        with self._lock:
            for slot, amount in enumerate((prompt, completion, cache_read, cache_write)):
                self._spent[slot] += amount

    def exhausted(self) -> str | None:
        """Which budget is spent ("token" or "dollar"), or ``None`` while both last."""
        with self._lock:
            prompt, completion, cache_read, cache_write = self._spent
        if self.tokens is not None and prompt + completion >= self.tokens:
            return "token"
        if self.usd is None or self.price is None:
            return None
        dollars = self.price.dollars(prompt, completion, cache_read, cache_write)
        return "dollar" if dollars >= self.usd else None


def run_spent(ledger: str | None) -> bool:
    """Whether the harness has said the run's budget is spent (``RUN_SPENT_FILE``)."""
    return ledger is not None and os.path.exists(os.path.join(ledger, RUN_SPENT_FILE))


def refusal(api: str, which: str) -> tuple[int, dict[str, object]]:
    """The status and body that say the budget is spent, in the request's API's shape;
    ``which`` is "token", "dollar" (the trial's) or ``RUN`` (the run's dollars)."""
    spent = "the run's dollar budget" if which == RUN else f"the trial's {which} budget"
    message = (
        f"deltarun: budget exhausted: {spent} is spent, so the model "
        "gateway forwards no more requests"
    )
    if api == ANTHROPIC:
        error = {"type": "invalid_request_error", "message": message}
        return 400, {"type": "error", "error": error}
    status = 400 if api == RESPONSES else 402
    kind = "insufficient_quota"
    return status, {"error": {"message": message, "type": kind, "param": None, "code": kind}}


def _amount(name: str, value: object) -> float:
    """A finite, non-negative number of dollars."""
    try:
        number = float(value) if isinstance(value, (int, float, str)) else math.nan
    except ValueError:
        number = math.nan
    if isinstance(value, bool) or not math.isfinite(number) or number < 0:
        raise ValueError(f"{name} must be a number, 0 or more")
    return number
