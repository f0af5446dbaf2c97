"""What a gateway's relay costs the engine: CPU per gateway-second of reading the proxy's
totals, as the relay reads them against a copy out each interval (the baseline).

A run with a budget or a shared rate limit gives each trial's gateway a relay
(``runner.sandbox.gateway_relay``) that reads the proxy's ``totals.json`` every interval
(0.2 s; 0.05 s on a paced route). A copy out of a container starts one of the engine's tar
processes; the relay stats the file (``path_stat``) and copies it out only when it changed.

Here: one container of the sandbox image with a ledger directory the real ``Ledger`` writes
into (one request settled every ``--every`` seconds, as an agent waiting on a model would),
read for ``--seconds`` at each interval by the relay's ``DockerGateway.totals`` and, in turn,
by ``get_archive`` alone. The CPU of the whole machine over each phase (the engine, its tar
processes and this process) per second, and the ratio relay/baseline (goal <= 0.25).

    python bench/relay_reads.py [--seconds 10] [--every 2] [--interval 0.2] [--smoke]

``--smoke``: 1 s a phase; a check that the benchmark runs, not a measurement.
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import smoke  # noqa: E402
from bench.fleet import host_busy  # noqa: E402
from runner.gateway.ledger import Ledger  # noqa: E402
from runner.sandbox.engine import connect  # noqa: E402
from runner.sandbox.gateway_ledger import LEDGER_DIR  # noqa: E402
from runner.sandbox.gateway_relay import DockerGateway  # noqa: E402
from tests.helpers import PY_IMAGE  # noqa: E402


def phase(
    read: Callable[[], object], ledger: Ledger, seconds: float, every: float, interval: float
) -> float:
    """Machine CPU per second while ``read`` runs each ``interval`` and the ledger settles
    one request each ``every`` seconds."""
    stop = threading.Event()

    def requests() -> None:
        n = 0
        while not stop.wait(every):
            n += 1
            ledger.note_rate({"granted": n})

    writer = threading.Thread(target=requests, daemon=True)
    start_cpu, start = host_busy(), time.monotonic()
    writer.start()
    while time.monotonic() - start < seconds:
        read()
        time.sleep(interval)
    stop.set()
    writer.join()
    return (host_busy() - start_cpu) / (time.monotonic() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--every", type=float, default=2.0)
    parser.add_argument("--interval", type=float, default=0.2)
    smoke.add_flag(parser)
    args = parser.parse_args()
    if args.smoke:
        args.seconds = 1.0
        smoke.announce("relay reads", "1 s a phase")
    client = connect()
    with tempfile.TemporaryDirectory(prefix="deltarun-bench-relay-") as tmp:
        ledger_dir = Path(tmp) / "ledger"
        ledger_dir.mkdir()
        ledger = Ledger(str(ledger_dir), stream=io.StringIO())
        container = client.create_container(
            PY_IMAGE,
            command=["sleep", str(int(4 * args.seconds) + 60)],
            labels={"deltarun.bench": "relay-reads"},
            host_config=client.create_host_config(
                binds={str(ledger_dir): {"bind": LEDGER_DIR, "mode": "ro"}}, network_mode="none"
            ),
        )["Id"]
        try:
            client.start(container)
            port = DockerGateway(client, container)

            def copy_out() -> object:
                stream, _ = client.get_archive(container, f"{LEDGER_DIR}/totals.json")
                return b"".join(stream)

            rest = phase(lambda: None, ledger, args.seconds, args.every, args.interval)
            baseline = phase(copy_out, ledger, args.seconds, args.every, args.interval)
            relay = phase(port.totals, ledger, args.seconds, args.every, args.interval)
        finally:
            client.remove_container(container, force=True)
    print(f"relay reads: machine at rest (writes only): {rest:.3f} CPU-s/s")
    print(
        f"relay reads: a copy out every {args.interval} s: {baseline:.3f} CPU-s/s; "
        f"the relay (stat, copy on change): {relay:.3f} CPU-s/s"
    )
    cost_baseline, cost_relay = max(baseline - rest, 1e-9), max(relay - rest, 0.0)
    print(f"relay reads: ratio relay/baseline {cost_relay / cost_baseline:.2f} (goal <= 0.25)")


if __name__ == "__main__":
    main()
