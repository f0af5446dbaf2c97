"""The gateway's key guard on an answer at the 32 MiB cap, against the floor of any search.

Every answer the model gateway forwards is searched whole for its key, plainly and in every
encoded form a client decodes back (``runner.gateway.keyguard``), before a byte of it goes
on toward the sandbox. This times ``KeyGuard.scrub_body`` on answers of ``MAX_RESPONSE_BYTES``
(the gateway's cap on one answer) and prints the ratio against the floor measured in the
same run on the same bytes: lowering the answer and one ``bytes.find`` of the key, which no
search for the key can do without. Each figure is the fastest of ``--runs`` repetitions.

    * prose: JSON-escaped Python source (backslash escapes, quotes, every letter), the
      shape of a long model answer;
    * filler: one byte repeated, no byte of which can start a form of the key;
    * worst: the key's first character repeated, where a match could start at every byte.

    python bench/key_scrub.py [--runs 3] [--smoke]

``--smoke`` (``bench/smoke.py``): 64 KiB answers, one run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import smoke  # noqa: E402
from runner.gateway.keyguard import KeyGuard  # noqa: E402
from runner.gateway.upstream import MAX_RESPONSE_BYTES  # noqa: E402

KEY = "sk-ant-api03-" + "Xq7vR2mK9pLw4tNc" * 3  # the shape of a provider's key


def answers(size: int) -> dict[str, bytes]:
    source = "".join(path.read_text() for path in sorted((ROOT / "runner").rglob("*.py")))
    prose = json.dumps({"content": source}).encode()
    return {
        "prose": (prose * (size // len(prose) + 1))[:size],
        "filler": b"p" * size,
        "worst": KEY[:1].encode() * size,
    }


def fastest(runs: int, work: Callable[[bytes], object], body: bytes) -> float:
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        work(body)
        best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="repetitions; the fastest is kept")
    smoke.add_flag(parser)
    args = parser.parse_args()
    size, runs = MAX_RESPONSE_BYTES, args.runs
    if args.smoke:
        size, runs = 64 << 10, 1
        smoke.announce("key scrub", "64 KiB answers, one run")
    guard, needle = KeyGuard(KEY), KEY.encode()
    for name, body in answers(size).items():
        floor = fastest(runs, lambda answer: answer.lower().find(needle), body)
        scrub = fastest(runs, guard.scrub_body, body)
        print(
            f"key scrub: {name}, {len(body) / (1 << 20):.2f} MiB: guard {scrub:.3f} s, "
            f"floor (lower + find) {floor:.3f} s, ratio {scrub / floor:.1f}"
        )


if __name__ == "__main__":
    main()
