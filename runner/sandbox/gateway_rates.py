"""Shared rate limits per route, on the worker: the relay's side of the gateway's permits.

``rate_limits`` in the controls gives a route model's limits for every machine together:
``concurrent`` requests, ``requests_per_minute`` and ``tokens_per_minute``. Each trial's
proxy forwards a model request only with a permit (``runner.gateway.permits``); its relay
(``runner.sandbox.gateway_relay``) reads how many its requests asked for, how many are in
flight and what they used, takes that many permits from the route's limiter (``RouteLimiter``:
Redis on a fleet, ``runner.distributed.rate_limits``; ``LocalLimiters`` in this process for
a local run) and writes their running total into the proxy's ledger volume. A 429 the proxy
met (it waits out its ``Retry-After`` and asks again) becomes a backoff of the whole route:
the limiter grants nothing to any gateway until it has passed.

The limiter is a token bucket per route for requests (``requests_per_minute / 60`` a second,
at most ``BURST_S`` seconds' worth at once) and one for tokens (the tokens answers used are
taken after them, so a request is granted while the bucket is not in debt), plus the
permits each gateway holds (in flight, or granted and not yet used) against
``concurrent``: a gateway's holding counts while its relay reported it in the last
``HOLD_S`` seconds, so a worker that dies frees its share on its own. Gateways waiting for
permits form a line by when each was last served: a permit for each one served less
recently is set aside before another is served, and one served goes to the back; so a
gateway with many requests open takes its turn like one with a single request (a hostile
agent cannot starve the other trials of the route).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

BURST_S = 0.5  # a bucket holds this many seconds of its rate: the largest burst (half the
# second a provider usually allows at once, so permits given out in a cluster fit in it)
HOLD_S = 10.0  # a gateway's holding counts this long after its relay last reported it
WANT_S = 1.0  # a gateway waits in the line this long after its relay last asked


@dataclass(frozen=True)
class RateLimits:
    """A route's limits across the fleet; 0 is no limit."""

    concurrent: int = 0
    requests_per_minute: int = 0
    tokens_per_minute: int = 0


def route_key(upstream: str, model: str) -> str:
    """One route's limiter: its endpoint and model (every run that shares them shares it)."""
    return hashlib.sha256(f"{upstream.rstrip('/')}\n{model}".encode()).hexdigest()[:32]


class RouteLimiter(Protocol):
    """A route's shared limiter."""

    def take(self, gateway: str, want: int, holding: int, tokens: int, backoff_s: float) -> int:
        """Report ``gateway``'s ``holding`` (permits in flight or unused), the ``tokens`` its
        answers used since the last call and a 429's ``backoff_s`` (0: none); grant up to
        ``want`` new permits. The number granted."""
        ...


class RouteLimiters(Protocol):
    def limiter(self, route: str, limits: RateLimits) -> RouteLimiter: ...


@dataclass
class _Bucket:
    requests: float | None = None
    tokens: float | None = None
    at: float = 0.0
    until: float = 0.0
    holdings: dict[str, tuple[int, float]] = field(default_factory=dict)
    # gateway -> (permits it waits for, last asked), and when each was last served
    wants: dict[str, tuple[int, float]] = field(default_factory=dict)
    served: dict[str, float] = field(default_factory=dict)


def grant(
    state: _Bucket, limits: RateLimits, now: float, ask: tuple[str, int, int, int, float]
) -> int:
    """The limiter's rule (the Redis script does the same): refill, note the holding, the
    tokens and the backoff, then grant what every limit allows."""
    gateway, want, holding, tokens, backoff_s = ask
    elapsed = max(now - (state.at or now), 0.0)
    state.at = now
    if limits.requests_per_minute:
        rate = limits.requests_per_minute / 60
        cap = max(1.0, rate * BURST_S)
        state.requests = min(
            cap, (cap if state.requests is None else state.requests) + elapsed * rate
        )
    if limits.tokens_per_minute:
        rate = limits.tokens_per_minute / 60
        cap = max(1.0, rate * BURST_S)
        start = cap if state.tokens is None else state.tokens
        state.tokens = min(cap, start + elapsed * rate) - tokens
    if backoff_s > 0:
        state.until = max(state.until, now + backoff_s)
    state.holdings[gateway] = (holding, now)
    for name, (_, seen) in list(state.holdings.items()):
        if now - seen > HOLD_S:
            del state.holdings[name]
            state.served.pop(name, None)
    for name, (_, asked) in list(state.wants.items()):
        if now - asked > WANT_S:
            del state.wants[name]
    if want <= 0:
        state.wants.pop(gateway, None)
        return 0
    state.wants[gateway] = (want, now)
    if now < state.until:
        return 0
    # The waiting gateways served least recently go first: a permit is set aside for each.
    mine = state.served.get(gateway, 0.0)
    older = sum(1 for name in state.wants if name != gateway and state.served.get(name, 0.0) < mine)
    granted = want
    if limits.requests_per_minute and state.requests is not None:
        granted = min(granted, int(state.requests) - older)
    if limits.tokens_per_minute and state.tokens is not None and state.tokens <= 0:
        granted = 0
    if limits.concurrent:
        others = sum(n for name, (n, _) in state.holdings.items() if name != gateway)
        granted = min(granted, limits.concurrent - others - holding - older)
    granted = max(granted, 0)
    if limits.requests_per_minute and state.requests is not None:
        state.requests -= granted
    state.holdings[gateway] = (holding + granted, now)  # held until its next report
    if granted:  # served: to the back of the line with what it still waits for
        state.served[gateway] = now
        state.wants[gateway] = (want - granted, now)
    return granted


class LocalLimiter:
    """A route's limiter in this process (a local run)."""

    def __init__(self, limits: RateLimits) -> None:
        self.limits = limits
        self.state = _Bucket()
        self._lock = threading.Lock()

    def take(self, gateway: str, want: int, holding: int, tokens: int, backoff_s: float) -> int:
        with self._lock:
            ask = (gateway, want, holding, tokens, backoff_s)
            return grant(self.state, self.limits, time.monotonic(), ask)


class LocalLimiters:
    """The routes' limiters of this process."""

    def __init__(self) -> None:
        self._limiters: dict[str, LocalLimiter] = {}
        self._lock = threading.Lock()

    def limiter(self, route: str, limits: RateLimits) -> LocalLimiter:
        with self._lock:
            found = self._limiters.get(route)
            if found is None or found.limits != limits:
                found = self._limiters[route] = LocalLimiter(limits)
            return found


LOCAL_LIMITERS = LocalLimiters()


class Pacer:
    """One gateway's permits: what its requests asked for, taken from the route's limiter."""

    def __init__(self, limiter: RouteLimiter, name: str) -> None:
        self.limiter, self.name = limiter, name
        self.granted = 0  # the running total the gateway holds in its permits file
        self.limited_seen = 0  # 429s already turned into a backoff
        self.tokens_seen = 0

    def step(self, totals: Mapping[str, Any]) -> None:
        """Take what the gateway's requests ask for; ``granted`` is the new running total."""
        rate = totals.get("rate")
        rate = rate if isinstance(rate, dict) else {}
        asked, used = _count(rate.get("asked")), _count(rate.get("used"))
        limited = _count(rate.get("limited"))
        backoff = 0.0
        if limited > self.limited_seen:
            self.limited_seen = limited
            wait = rate.get("retry_after_s")
            backoff = float(wait) if isinstance(wait, (int, float)) and wait > 0 else 1.0
        tokens = _count(totals.get("prompt_tokens")) + _count(totals.get("completion_tokens"))
        new_tokens, self.tokens_seen = (
            max(tokens - self.tokens_seen, 0),
            max(tokens, self.tokens_seen),
        )
        holding = _count(rate.get("in_flight")) + max(self.granted - used, 0)
        want = max(asked - self.granted, 0)
        self.granted += self.limiter.take(self.name, want, holding, new_tokens, backoff)

    def close(self) -> None:
        """The gateway is gone: its holding is freed at once."""
        self.limiter.take(self.name, 0, 0, 0, 0.0)


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
