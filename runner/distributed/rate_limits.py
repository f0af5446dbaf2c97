"""Shared rate limits per route across the fleet, in Redis: the limiter every relay takes its
gateway's permits from (``runner.sandbox.gateway_rates``, where the rule is told).

One hash per route (``deltarun:rate:<route>``, the route's endpoint and model hashed): the
request and token buckets with the time of their last refill, the backoff's end, and each
gateway's holding with the time its relay last reported it. One Lua script per relay step
refills, notes, and grants, so two workers asking at once never get the same permit; the
clock is Redis's own (``TIME``), one for every worker. The hash expires an hour after its
last use. Only the worker process holds Redis credentials; the proxy and the sandbox never do.
"""

from __future__ import annotations

from typing import Any

import redis

from runner.distributed import keys
from runner.sandbox.gateway_rates import BURST_S, HOLD_S, WANT_S, RateLimits

TTL_S = 3600

# KEYS[1] the route; ARGV: gateway, want, holding, tokens, backoff_s, concurrent, rpm, tpm,
# burst_s, hold_s, ttl, want_s. The same rule as gateway_rates.grant: h:/s: a gateway's
# holding and when it was reported, a: when it last asked for permits, l: last served.
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local key, gw = KEYS[1], ARGV[1]
local want, holding, tokens = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local backoff, conc = tonumber(ARGV[5]), tonumber(ARGV[6])
local rpm, tpm, burst, hold = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9]),
  tonumber(ARGV[10])
local wantfor = tonumber(ARGV[12])
local s = redis.call('HMGET', key, 'rq', 'tk', 'at', 'until')
local rq, tk = tonumber(s[1]), tonumber(s[2])
local at, untl = tonumber(s[3]) or now, tonumber(s[4]) or 0
local elapsed = math.max(now - at, 0)
if rpm > 0 then
  local rate = rpm / 60
  local cap = math.max(1, rate * burst)
  rq = math.min(cap, (rq or cap) + elapsed * rate)
end
if tpm > 0 then
  local rate = tpm / 60
  local cap = math.max(1, rate * burst)
  tk = math.min(cap, (tk or cap) + elapsed * rate) - tokens
end
if backoff > 0 then untl = math.max(untl, now + backoff) end
redis.call('HSET', key, 'h:' .. gw, holding, 's:' .. gw, now)
local mine = tonumber(redis.call('HGET', key, 'l:' .. gw)) or 0
if want > 0 then
  redis.call('HSET', key, 'a:' .. gw, now)
else
  redis.call('HDEL', key, 'a:' .. gw)
end
local others, older = 0, 0
local all = redis.call('HGETALL', key)
for i = 1, #all, 2 do
  local f = all[i]
  local kind, name = string.sub(f, 1, 2), string.sub(f, 3)
  if kind == 'h:' and name ~= gw then
    local seen = tonumber(redis.call('HGET', key, 's:' .. name)) or 0
    if now - seen > hold then
      redis.call('HDEL', key, f, 's:' .. name, 'l:' .. name)
    else
      others = others + tonumber(all[i + 1])
    end
  elseif kind == 'a:' and name ~= gw then
    if now - tonumber(all[i + 1]) > wantfor then
      redis.call('HDEL', key, f)
    elseif (tonumber(redis.call('HGET', key, 'l:' .. name)) or 0) < mine then
      older = older + 1
    end
  end
end
local granted = 0
if want > 0 and now >= untl then
  granted = want
  if rpm > 0 then granted = math.min(granted, math.floor(rq) - older) end
  if tpm > 0 and tk <= 0 then granted = 0 end
  if conc > 0 then granted = math.min(granted, conc - others - holding - older) end
  granted = math.max(granted, 0)
  if rpm > 0 then rq = rq - granted end
  redis.call('HSET', key, 'h:' .. gw, holding + granted)
  if granted > 0 then redis.call('HSET', key, 'l:' .. gw, now) end
end
redis.call('HSET', key, 'at', tostring(now), 'until', tostring(untl))
if rq then redis.call('HSET', key, 'rq', tostring(rq)) end
if tk then redis.call('HSET', key, 'tk', tostring(tk)) end
redis.call('EXPIRE', key, ARGV[11])
return granted
"""


def route_hash(route: str) -> str:
    return f"{keys.PREFIX}:rate:{route[:64]}"


class RedisLimiter:
    """A route's limiter in the fleet's Redis (``gateway_rates.RouteLimiter``)."""

    def __init__(self, client: redis.Redis, route: str, limits: RateLimits) -> None:
        self.key, self.limits = route_hash(route), limits
        self._take: Any = client.register_script(_TAKE)

    def take(self, gateway: str, want: int, holding: int, tokens: int, backoff_s: float) -> int:
        limits = self.limits
        args = [gateway[:64], want, holding, tokens, repr(float(backoff_s))]
        args += [limits.concurrent, limits.requests_per_minute, limits.tokens_per_minute]
        args += [repr(BURST_S), repr(HOLD_S), TTL_S, repr(WANT_S)]
        return int(self._take(keys=[self.key], args=args))


class RedisLimiters:
    """The routes' limiters in the fleet's Redis (``gateway_rates.RouteLimiters``)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def limiter(self, route: str, limits: RateLimits) -> RedisLimiter:
        return RedisLimiter(self.client, route, limits)
