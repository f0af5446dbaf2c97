"""The run's budget across a fleet: how far past ``budget.run_usd`` the spend goes with N
trials in flight (bench/fleet.py prints it; alone: ``python bench/fleet_budget.py``).

The real relay (``runner.sandbox.gateway_relay.Relay``, its 0.2 s interval) and the real
Redis account (``runner.distributed.run_budget``, one connection per simulated worker) on
a real ``redis-server``; the gateways are simulated in memory (no Docker): each holds its
totals as the proxy's ledger does and checks the run's "spent" at the start of each request,
as the proxy does; its agent asks one request at a time, each answered after ``latency_s``
and billed 1 000 input and 500 output tokens ($0.002 at $1/$2 per million) when it ends. A
trial alone would ask ``TRIAL_ASKS``; the budget is ``BUDGET_ASKS`` answers. Printed per
fleet size: the answers billed, the overshoot over ``run_usd`` in answers and dollars, the
requests in flight it is bounded by, and what the coordinator's per-record check alone
would have let the trials in flight spend.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runner.distributed.run_budget import RedisAccounts, figures  # noqa: E402
from runner.sandbox.gateway_relay import RELAY_INTERVAL_S, Relay  # noqa: E402
from tests.distributed_support import RedisServer  # noqa: E402

PRICE = {"input": 1.0, "output": 2.0}
PER_ASK_USD = 0.002
TRIAL_ASKS = 100
BUDGET_ASKS = 200
WORKERS = 5  # simulated machines: each its own Redis connection for its relays


class SimGateway:
    """A gateway in memory: its ledger totals and the run's "spent" its relay pushed."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.prompt = self.completion = 0
        self.spent = False
        self.billed = 0

    def totals(self) -> Mapping[str, Any]:
        with self.lock:
            return {"prompt_tokens": self.prompt, "completion_tokens": self.completion}

    def push(self) -> bool:
        self.spent = True
        return True

    def agent(self, latency_s: float) -> None:
        for _ in range(TRIAL_ASKS):
            if self.spent:  # the proxy's check, before it forwards a request
                return
            time.sleep(latency_s)
            with self.lock:  # settled before the answer goes back
                self.prompt += 1000
                self.completion += 500
                self.billed += 1


@dataclass
class BudgetFigure:
    in_flight: int
    billed: int
    account_usd: float

    @property
    def overshoot(self) -> int:
        return self.billed - BUDGET_ASKS


def run_budget_fleet(server: RedisServer, in_flight: int, latency_s: float) -> BudgetFigure:
    run_id = f"bench-budget-{in_flight}-{time.monotonic_ns()}"
    workers = [RedisAccounts(server.client()) for _ in range(WORKERS)]
    gateways = [SimGateway() for _ in range(in_flight)]
    relays = [
        Relay(gw, workers[i % WORKERS].account(run_id, BUDGET_ASKS * PER_ASK_USD), "arm", PRICE)
        for i, gw in enumerate(gateways)
    ]
    agents = [threading.Thread(target=gw.agent, args=(latency_s,)) for gw in gateways]
    for relay in relays:
        relay.start()
    for thread in agents:
        thread.start()
    for thread in agents:
        thread.join()
    for relay in relays:
        relay.stop()
        relay.step()  # the trial's last settlement
    account = figures(server.client(), run_id) or {"spent_usd": 0.0}
    return BudgetFigure(in_flight, sum(gw.billed for gw in gateways), account["spent_usd"])


def budget_line(figure: BudgetFigure, latency_s: float) -> str:
    over = figure.overshoot
    return (
        f"budget: {figure.in_flight} trials in flight: run_usd ${BUDGET_ASKS * PER_ASK_USD:.2f} "
        f"({BUDGET_ASKS} answers), spent ${figure.billed * PER_ASK_USD:.3f} ({figure.billed} "
        f"answers; the account says ${figure.account_usd:.3f}): overshoot {over} answers "
        f"(${over * PER_ASK_USD:.3f}, {over / BUDGET_ASKS:.1%} of run_usd): the "
        f"{figure.in_flight} requests in flight and those started within the relay's "
        f"{RELAY_INTERVAL_S:g} s (answers take {latency_s:g} s); the coordinator's per-record "
        f"check alone: up to ${figure.in_flight * TRIAL_ASKS * PER_ASK_USD:.2f} "
        f"({figure.in_flight} trials of {TRIAL_ASKS} answers)"
    )


def print_budget(server: RedisServer, sizes: list[int], latency_s: float = 0.5) -> None:
    for n in sizes:
        print(budget_line(run_budget_fleet(server, n, latency_s), latency_s))
        sys.stdout.flush()


def main() -> int:
    import shutil
    import tempfile

    if shutil.which("redis-server") is None:
        print("budget: redis-server is not installed (run `make redis`); nothing measured")
        return 1
    with tempfile.TemporaryDirectory(prefix="deltarun-budget-") as tmp:
        server = RedisServer(Path(tmp) / "redis", fsync="everysec")
        server.start()
        try:
            print_budget(server, [10, 25, 50])
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
