"""Host memory of one trial whose patch is at the verify cap, made of 2-byte lines.

A patch of tens of millions of short lines once cost the worker many times its
size (one Python object per line). This runs, in a fresh child process each,
a real trial whose agent writes a file of ``a\\n`` lines so that ``git diff``
is just under ``MAX_VERIFY_PATCH_BYTES`` (64 MiB, ~22 million lines), and the
same trial with an empty patch as the baseline, and prints the peak resident
memory of each and the difference against the cap.

    python bench/patch_memory.py [--smoke]

``--smoke`` (``bench/smoke.py``): 1,000 lines instead of a patch at the cap.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import smoke  # noqa: E402
from runner.trial.workspace import MAX_VERIFY_PATCH_BYTES  # noqa: E402
from tests.helpers import make_suite, repo_task, write_agent  # noqa: E402

HEADER = 200  # bytes of the diff's headers, a generous estimate


def child(lines: int) -> None:
    """One trial in this process; prints its outcome and this process's peak RSS."""
    from runner.sandbox.engine import connect
    from tests.test_trial_docker import run_one

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        script = (
            f"python3 -c \"open('big.txt', 'wb').write(b'a\\\\n' * {lines})\"\n"
            if lines
            else "true\n"
        )
        agent = write_agent(root, "writer", script)
        controls = make_suite(
            root,
            [repo_task("t1", timeout_s=300)],
            [
                {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
                {"name": "writer", "agent": agent},
            ],
            runtime={"limits": {"memory": "2g", "workspace": "1g"}, "verify_timeout_s": 300},
        )
        # A run id of its own: run_one checks that no sandbox of its run is left, and tests
        # running at the same time use theirs.
        run_id = f"bench-patch-memory-{uuid.uuid4().hex[:12]}"
        trial = run_one(connect(), controls, "t1", "writer", run_id=run_id)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"outcome": trial.outcome.value, "reason": trial.reason, "peak": peak}))


def measure(lines: int) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", str(lines)],
        stdout=subprocess.PIPE,  # its stderr is ours: a failure shows its traceback
        text=True,
        check=True,
        timeout=1200,
    )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    smoke.add_flag(parser)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child)
        return
    cap = MAX_VERIFY_PATCH_BYTES
    lines = (cap - HEADER) // 3  # each line of the new file is "+a\n" in the diff
    if args.smoke:
        lines = 1000
        smoke.announce("patch memory", f"{lines:,} lines, far under the cap")
    base = measure(0)
    big = measure(lines)
    extra = int(big["peak"]) - int(base["peak"])  # type: ignore[call-overload]
    mib = 1 << 20
    print(
        f"patch memory: {lines:,} two-byte lines, a diff of {(3 * lines + HEADER) / mib:.2f} "
        f"MiB against the verify cap of {cap // mib} MiB; outcome {big['outcome']}"
    )
    print(
        f"patch memory: peak RSS: empty patch {int(base['peak']) // mib} MiB, "  # type: ignore[call-overload]
        f"{lines:,}-line patch {int(big['peak']) // mib} MiB; "  # type: ignore[call-overload]
        f"extra {extra // mib} MiB = {extra / cap:.2f} x the cap"
    )


if __name__ == "__main__":
    main()
