"""One budget for the run on every machine: the relay between a trial's gateway and the run's
account, on the worker.

``budget.run_usd`` is the run's dollars, whatever the number of machines and trials in
flight. Each trial's gateway (``runner.gateway``) meters its own answers; the relay, a thread
of the worker process beside the gateway, reads the gateway's totals (``/ledger/totals.json``,
written before each answer goes back to the agent) every ``RELAY_INTERVAL_S``, prices them
at the route's pinned price and debits what is new to the run's account (``RunAccount``: an
in-process counter for a local run, ``runner.distributed.run_budget`` in Redis for a fleet).
Once the account is spent, on this machine or any other, the relay writes
``runner.gateway.budget.RUN_SPENT_FILE`` into the gateway's ledger volume through the
engine (``put_archive``), and the proxy refuses every later request in its API's own shape,
the trial's budget refusal naming the run's budget: the agent's outcome, never an error.

Why a relay, not the proxy talking to Redis: the proxy sits beside a hostile agent and
already holds the provider key; Redis credentials there would give whoever breaks the proxy
the whole fleet's broker (every run's jobs, records and budgets), and a scoped ACL user
would still let it credit its own run. The relay runs where the Redis credentials already
are (the worker), reads only what the proxy wrote before answering, and writes one file the
proxy only reads. The sandbox has no route to Redis, the relay or the engine: it reaches
the proxy's HTTP port alone, and no request the proxy forwards or answers changes the file.

What it costs: per interval, one stat of the gateway's totals (``path_stat``, no copy)
and one account call; a copy of the totals out only when their stat changed (each version
the proxy writes has a later modification time) or ``REREAD_S`` has passed (how late a
change can be seen on a file system that keeps only coarse times). And an overshoot
bounded by the requests in flight when the budget is crossed, plus those started before
the word reaches every gateway (one interval and one copy into its volume, which a loaded
engine makes slower). A request is debited when its
answer is settled, never before; the last settlement of a trial (``close``) debits what its
ledger holds in full, requests lost in flight at their maximum.

Amounts are whole micro-dollars (the precision of a record's ``cost_usd``), so the account's
sum is the sum of the records' costs.
"""

from __future__ import annotations

import io
import json
import logging
import tarfile
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import docker

from runner.config.controls import Price
from runner.errors import SandboxError, UserError
from runner.gateway.budget import RUN_SPENT_FILE
from runner.gateway.permits import PERMITS_FILE
from runner.sandbox.base import ModelAccess
from runner.sandbox.engine import API_ERRORS, path_stat
from runner.sandbox.gateway_ledger import LEDGER_DIR, Exchange
from runner.sandbox.gateway_rates import Pacer, RateLimits, RouteLimiters

log = logging.getLogger(__name__)

RELAY_INTERVAL_S = 0.2
# An unchanged stat is trusted this long, then the totals are read anyway: a file system
# that keeps only coarse times could give two versions of the file one stat.
REREAD_S = 5.0
PACED_INTERVAL_S = 0.05  # a paced request waits for the relay's next step: keep it short
TOTALS_CAP = 1 << 20  # totals.json is small and bounded by the proxy
MICROS = 1_000_000
COUNTS = ("prompt_tokens", "completion_tokens", "cache_read_tokens", "cache_write_tokens")


class RunAccount(Protocol):
    """The run's dollars, shared by every gateway of the run."""

    def debit(self, arm: str, micros: int) -> bool:
        """Add ``micros`` (millionths of a dollar) spent by ``arm``; whether the run's
        budget is now spent."""
        ...

    def spent(self) -> bool:
        """Whether the run's budget is spent."""
        ...


class RunAccounts(Protocol):
    """Where the accounts of runs live (this process, or the fleet's Redis)."""

    def account(self, run_id: str, limit_usd: float) -> RunAccount: ...


class LocalAccount:
    """A run's account in this process (the local executor: no Redis)."""

    def __init__(self, limit_usd: float, spent_micros: int = 0) -> None:
        self.limit = round(limit_usd * MICROS)
        self.total = spent_micros
        self.arms: dict[str, int] = {}
        self._lock = threading.Lock()

    def debit(self, arm: str, micros: int) -> bool:
        with self._lock:
            self.total += micros
            self.arms[arm] = self.arms.get(arm, 0) + micros
            return self.total >= self.limit

    def spent(self) -> bool:
        with self._lock:
            return self.total >= self.limit


class LocalAccounts:
    """The accounts of the runs this process runs, by run id."""

    def __init__(self) -> None:
        self._accounts: dict[str, LocalAccount] = {}
        self._lock = threading.Lock()

    def account(self, run_id: str, limit_usd: float) -> LocalAccount:
        with self._lock:
            if run_id not in self._accounts:
                self._accounts[run_id] = LocalAccount(limit_usd)
            return self._accounts[run_id]

    def open(self, run_id: str, limit_usd: float, spent_usd: float) -> LocalAccount:
        """The run's account, starting from what its records already spent (a resumed run)."""
        with self._lock:
            account = LocalAccount(limit_usd, round(spent_usd * MICROS))
            self._accounts[run_id] = account
            return account

    def spent(self, run_id: str) -> bool:
        with self._lock:
            account = self._accounts.get(run_id)
        return account is not None and account.spent()


LOCAL_ACCOUNTS = LocalAccounts()


def micros_of(price: Price, counts: Iterable[int]) -> int:
    """Millionths of a dollar of (prompt, completion, cache read, cache write) tokens, priced
    as the gateway and the record price them (``Price.usage_dollars``)."""
    prompt, completion, cache_read, cache_write = counts
    return round(price.usage_dollars(prompt, completion, cache_read, cache_write) * MICROS)


class GatewayPort(Protocol):
    """What the relay does with one gateway: read its totals, tell it the run is spent."""

    def totals(self) -> Mapping[str, Any] | None:
        """The gateway's ledger totals (``runner.gateway.ledger``), None when unreadable now."""
        ...

    def push(self) -> bool:
        """Tell the gateway the run's budget is spent; whether it was told."""
        ...

    def permit(self, total: int) -> bool:
        """Give the gateway permits up to the running ``total`` (0 turns its gate on)."""
        ...


class Relay:
    """Carries one gateway's spend to the run's account, and the account's end back into the
    gateway; with a ``pacer``, the route's permits too (runner.sandbox.gateway_rates).
    ``start`` after the gateway is ready, ``close`` once its ledger is read."""

    def __init__(
        self,
        gateway: GatewayPort,
        account: RunAccount | None,
        arm: str,
        price: Mapping[str, float] | None,
        interval_s: float = RELAY_INTERVAL_S,
        pacer: Pacer | None = None,
    ) -> None:
        self.gateway, self.account, self.pacer = gateway, account, pacer
        self.arm, self.price = arm, None if price is None else Price.model_validate(price)
        self.interval_s = PACED_INTERVAL_S if pacer is not None else interval_s
        self.debited = 0  # micro-dollars of this gateway already in the account
        self.pushed = False  # the gateway holds the run's "spent"
        self.permitted = 0  # the permits the gateway's file holds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gateway-relay", daemon=True)

    def start(self) -> None:
        """One step before the sandbox exists (a run already spent is refused from the first
        request, and a paced route's gate is on), then one each interval."""
        if self.pacer is not None and not self.gateway.permit(0):
            raise SandboxError("the model gateway's rate gate could not be turned on")
        try:
            self.step()
        except Exception as exc:  # the account briefly away: the next interval tries again
            log.warning("run budget relay: %s: %s", type(exc).__name__, exc)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.step()
            except Exception as exc:  # the account or the engine, briefly away: next interval
                log.warning("run budget relay: %s: %s", type(exc).__name__, exc)

    def step(self) -> None:
        account = self.account
        if account is not None and not self.pushed and account.spent():
            self.pushed = self.gateway.push()
        totals = self.gateway.totals()
        if totals is None:
            return
        pacer = self.pacer
        if pacer is not None:
            pacer.step(totals)
            if pacer.granted > self.permitted and self.gateway.permit(pacer.granted):
                self.permitted = pacer.granted
        if account is not None:
            self._charge(self._micros(_count(totals.get(n)) for n in COUNTS))

    def stop(self) -> None:
        """No more reads (before the gateway is removed)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=30)

    def close(self, exchanges: Iterable[Exchange]) -> None:
        """Stop, then debit the trial's whole ledger (``exchanges``: what the gateway read at
        its end, requests lost in flight at their maximum)."""
        self.stop()
        if self.pacer is not None:
            self.pacer.close()
        if self.account is None:
            return
        found = list(exchanges)
        sums = (sum(getattr(e, name) for e in found) for name in COUNTS)
        self._charge(self._micros(sums))

    def _micros(self, counts: Iterable[int]) -> int:
        """``counts`` priced (``relay_for`` gives every relay with an account a price)."""
        return 0 if self.price is None else micros_of(self.price, counts)

    def _charge(self, micros: int) -> None:
        new = micros - self.debited
        if new <= 0 or self.account is None:
            return
        spent = self.account.debit(self.arm, new)
        self.debited = micros
        if spent and not self.pushed:
            self.pushed = self.gateway.push()


class DockerGateway:
    """A gateway's proxy container, as its relay reads and tells it (``GatewayPort``)."""

    def __init__(self, client: docker.APIClient, container: str) -> None:
        self.client, self.container = client, container
        # The totals last read, the stat they were read at, and when (``totals``).
        self._read: tuple[tuple[int, str] | None, float, dict[str, Any]] | None = None

    def push(self) -> bool:
        """Write the run's "spent" into the gateway's ledger volume (the proxy reads it
        before forwarding each request)."""
        return self._put(RUN_SPENT_FILE, b"the run's budget is spent\n")

    def _put(self, name: str, data: bytes) -> bool:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o444
            archive.addfile(info, io.BytesIO(data))
        try:
            self.client.put_archive(self.container, LEDGER_DIR, buffer.getvalue())
            return True
        except API_ERRORS as exc:  # the proxy is going away: its trial is over
            log.warning("gateway relay: could not reach the gateway: %s", exc)
            return False

    def permit(self, total: int) -> bool:
        """Write the running total of permits into the gateway's ledger volume."""
        return self._put(PERMITS_FILE, f"{total}\n".encode())

    def totals(self) -> dict[str, Any] | None:
        """The gateway's totals: those last read while the file's stat is the same as then
        (for up to ``REREAD_S``), else read again."""
        path = f"{LEDGER_DIR}/totals.json"
        stat, now = path_stat(self.client, self.container, path), time.monotonic()
        if self._read is not None and stat is not None:
            seen, at, kept = self._read
            if stat == seen and now - at < REREAD_S:
                return kept
        value = self._copy_out(path)
        self._read = None if value is None else (stat, now, value)
        return value

    def _copy_out(self, path: str) -> dict[str, Any] | None:
        try:
            stream, _ = self.client.get_archive(self.container, path)
            data = bytearray()
            for chunk in stream:
                data += chunk
                if len(data) > TOTALS_CAP:
                    return None
        except API_ERRORS:
            return None  # between two writes, or the proxy is going away
        try:
            with tarfile.open(fileobj=io.BytesIO(bytes(data)), mode="r:") as archive:
                member = archive.next()
                handle = archive.extractfile(member) if member and member.isreg() else None
                value = json.loads(handle.read()) if handle is not None else None
        except (tarfile.TarError, ValueError, EOFError):
            return None
        return value if isinstance(value, dict) else None


def relay_for(
    client: docker.APIClient,
    container: str,
    access: ModelAccess,
    accounts: RunAccounts | None,
    limiters: RouteLimiters | None,
) -> Relay | None:
    """The relay of a gateway whose trial has a run budget or a route with shared rate
    limits; None without either."""
    account = pacer = None
    if access.run_usd is not None and accounts is not None and access.run_id is not None:
        if access.price is None:
            raise UserError(
                "budget.run_usd needs the route model's price in prices: the gateway cannot "
                "count dollars without it"
            )
        account = accounts.account(access.run_id, access.run_usd)
    if access.rate_limits is not None and access.rate_route and limiters is not None:
        limiter = limiters.limiter(access.rate_route, RateLimits(*access.rate_limits))
        pacer = Pacer(limiter, container[:24])
    if account is None and pacer is None:
        return None
    gateway = DockerGateway(client, container)
    return Relay(gateway, account, access.arm or "?", access.price, pacer=pacer)


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
