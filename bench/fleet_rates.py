"""Shared rate limits per route: what a rate-limited model refuses and how near its limit the
fleet's gateways keep it (bench/fleet.py prints it; alone: ``python bench/fleet_rates.py``).

Real proxies (runner/gateway/proxy.py as processes on the host), the real relay and pacer,
and the Redis limiter on a real ``redis-server`` (one client per simulated worker); a
scripted model on 127.0.0.1 allowing ``RATE`` requests a second and answering 429 with
``Retry-After: 1`` past it (tests/test_rate_limits.py). For each fleet size N: N gateways on
two workers, two agents each asking as fast as they are answered for ``SECONDS``, once with
``rate_limits`` at the model's rate and once without. Printed: requests answered a second
(over the limit), and the share of requests the model refused.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runner.distributed.rate_limits import RedisLimiters  # noqa: E402
from runner.sandbox.gateway_rates import RateLimits, route_key  # noqa: E402
from tests.distributed_support import RedisServer  # noqa: E402
from tests.test_rate_limits import RateModel, gateways, hammer, serve_model, stop  # noqa: E402

RATE = 20
SECONDS = 8.0


def measure(server: RedisServer, size: int, paced: bool, seconds: float) -> tuple[float, float]:
    """Answers a second over the limit, and the share of requests the model refused."""
    state = RateModel(rate=float(RATE))
    http, upstream = serve_model(state)
    limiters = None
    if paced:
        route = f"{route_key(upstream, 'm')}-{size}"
        limits = RateLimits(requests_per_minute=RATE * 60)
        limiters = [RedisLimiters(server.client()).limiter(route, limits) for _ in range(2)]
    found = gateways(upstream, size, limiters)
    start = time.monotonic()
    try:
        hammer(found, 2, seconds)
    finally:
        stop(found)
        http.shutdown()
        http.server_close()
    # Answers within the window (the first half second aside: the buckets start full).
    inside = [t for t in state.answered if start + 0.5 <= t <= start + seconds]
    refused = len(state.refused)
    share = refused / max(len(state.answered) + refused, 1)
    return len(inside) / (seconds - 0.5) / RATE, share


def print_rates(server: RedisServer, sizes: list[int], seconds: float = SECONDS) -> None:
    for size in sizes:
        ratio, share = measure(server, size, True, seconds)
        bare_ratio, bare_share = measure(server, size, False, seconds / 2)
        print(
            f"rate limits: {size} gateways on 2 workers, {2 * size} agents, model limit {RATE}/s: "
            f"throughput {ratio:.2f} of the limit, {share:.1%} of requests refused (429); "
            f"without rate_limits {bare_ratio:.2f} and {bare_share:.1%}"
        )
        sys.stdout.flush()


def main() -> int:
    import shutil
    import tempfile

    if shutil.which("redis-server") is None:
        print("rate limits: redis-server is not installed (run `make redis`); nothing measured")
        return 1
    with tempfile.TemporaryDirectory(prefix="deltarun-rates-") as tmp:
        server = RedisServer(Path(tmp) / "redis", fsync="everysec")
        server.start()
        try:
            print_rates(server, [4, 10])
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
