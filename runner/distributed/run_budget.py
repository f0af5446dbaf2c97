"""The run's dollar budget across the fleet, in Redis: the account every gateway's relay
debits (``runner.sandbox.gateway_relay``) and the coordinator reads.

One hash per run, ``deltarun:run-budget:<run>``: ``limit`` and ``spent`` in micro-dollars,
``arm:<name>`` per arm, ``reached`` once ``spent >= limit``. A debit is one Lua script, so two
workers crossing the limit at once see one total. The debit that reaches the limit also sets
the run's stop flag (``keys.stopped``, "run budget spent"): every worker skips the run's jobs
not yet started, and every relay pushes "spent" into its gateway at its next interval.

Only the worker process (the relay) and the coordinator hold Redis credentials; the proxy and
the sandbox never do (docs/many-machines.md, "One budget across the fleet"). The account
expires a week after its last write and goes with the run's other keys (``keys.run_keys``)
when the run finishes or ``gc --broker`` finds it dead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis

from runner.distributed import keys
from runner.executors.contract import PreparedRun
from runner.sandbox.gateway_relay import MICROS

REASON = "run budget spent"

# KEYS[1] the account, KEYS[2] the run's stop flag; ARGV: micros, arm field, limit, ttl, reason
_DEBIT = """
redis.call('HSETNX', KEYS[1], 'limit', ARGV[3])
local spent = redis.call('HINCRBY', KEYS[1], 'spent', ARGV[1])
redis.call('HINCRBY', KEYS[1], ARGV[2], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[4])
local limit = tonumber(redis.call('HGET', KEYS[1], 'limit'))
if spent >= limit then
  if redis.call('HSETNX', KEYS[1], 'reached', spent) == 1 then
    redis.call('SET', KEYS[2], ARGV[5], 'EX', ARGV[4])
  end
  return 1
end
return 0
"""


def account_key(run_id: str) -> str:
    return keys.run_budget(run_id)


class RedisAccount:
    """A run's account in the fleet's Redis (``gateway_relay.RunAccount``)."""

    def __init__(self, client: redis.Redis, run_id: str, limit_usd: float) -> None:
        self.client, self.run_id = client, run_id
        self.limit = round(limit_usd * MICROS)
        self._debit: Any = client.register_script(_DEBIT)
        self._spent = False

    def debit(self, arm: str, micros: int) -> bool:
        reached = self._debit(
            keys=[account_key(self.run_id), keys.stopped(self.run_id)],
            args=[micros, f"arm:{arm[:200]}", self.limit, keys.RUN_KEY_TTL_S, REASON],
        )
        self._spent = self._spent or bool(reached)
        return self._spent

    def spent(self) -> bool:
        if not self._spent:
            self._spent = bool(self.client.hexists(account_key(self.run_id), "reached"))
        return self._spent


class RedisAccounts:
    """The accounts of every run in the fleet's Redis (``gateway_relay.RunAccounts``)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def account(self, run_id: str, limit_usd: float) -> RedisAccount:
        return RedisAccount(self.client, run_id, limit_usd)


def open_account(
    client: redis.Redis,
    run_id: str,
    limit_usd: float,
    spent_usd: float,
    arms: dict[str, float] | None = None,
) -> None:
    """At the coordinator's start: the account holds at least what the run's records already
    spent, in all and per arm (a resumed run whose keys expired starts from its ledger, not
    from zero)."""
    key = account_key(run_id)
    spent = round(spent_usd * MICROS)
    pipe = client.pipeline(transaction=True)
    pipe.hsetnx(key, "limit", round(limit_usd * MICROS))
    pipe.hsetnx(key, "spent", spent)
    for arm, usd in (arms or {}).items():
        pipe.hsetnx(key, f"arm:{arm[:200]}", round(usd * MICROS))
    pipe.expire(key, keys.RUN_KEY_TTL_S)
    pipe.execute()
    if spent and int(client.hget(key, "spent") or 0) < spent:
        client.hset(key, "spent", spent)


def figures(client: redis.Redis, run_id: str) -> dict[str, Any] | None:
    """The account in dollars: ``limit``, ``spent``, ``reached`` and ``arms``; None without one."""
    raw = client.hgetall(account_key(run_id))
    if not raw:
        return None
    values = {(k.decode() if isinstance(k, bytes) else str(k)): int(v) for k, v in raw.items()}
    return {
        "limit_usd": values.get("limit", 0) / MICROS,
        "spent_usd": values.get("spent", 0) / MICROS,
        "reached": "reached" in values,
        "arms": {k[4:]: v / MICROS for k, v in values.items() if k.startswith("arm:")},
    }


def reached(client: redis.Redis, run_id: str) -> bool:
    """Whether the run's account is spent."""
    return bool(client.hexists(account_key(run_id), "reached"))


def ending_line(found: dict[str, Any] | None) -> str:
    """The coordinator's line once the run's budget ended the run."""
    if found is None:
        return "run budget spent across the fleet; no further trial started"
    arms = ", ".join(f"{arm} ${usd:.4f}" for arm, usd in sorted(found["arms"].items()))
    return (
        f"run budget spent across the fleet: ${found['spent_usd']:.4f} of "
        f"${found['limit_usd']:.4f} ({arms or 'no arm'}); every gateway refused the requests "
        "made after it and no further trial started"
    )


def open_for(prepared: PreparedRun, client: redis.Redis) -> float | None:
    """At the coordinator's start: the run's dollar budget (None without one), its account
    holding at least what the run's records already spent; the run's stop flag lifted (a
    resumed run starts its workers again) unless the account is spent."""
    budget, run_id = prepared.loaded.controls.budget, prepared.meta.run_id
    if budget is None or budget.run_usd is None:
        client.delete(keys.stopped(run_id))
        return None
    arms: dict[str, float] = {}
    for trial in prepared.run_dir.scored_trials():
        arms[trial.arm] = arms.get(trial.arm, 0.0) + (trial.cost_usd or 0.0)
    open_account(client, run_id, budget.run_usd, sum(arms.values()), arms)
    if not reached(client, run_id):
        client.delete(keys.stopped(run_id))
    return budget.run_usd


def end_line(client: redis.Redis, run_id: str, in_flight: Callable[[], bool]) -> str | None:
    """The coordinator's line when the run's budget is spent and none of its pending jobs is
    ``in_flight`` (leased or published): the run ends there. None while it goes on."""
    if not reached(client, run_id) or in_flight():
        return None
    return ending_line(figures(client, run_id))
