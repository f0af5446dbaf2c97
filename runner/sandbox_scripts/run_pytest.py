"""Start pytest for the verify phase the way the harness decides, and record its results.

Runs in the verify sandbox as the test's uid with the image's python3:
``python3 -B -s run_pytest.py < spec.json``. The spec comes on standard input
(read, then closed, before any code under test is imported), so the nonce that
marks the results file exists only in this process's memory:

    {"nonce": ..., "rootdir": "/workspace", "results": ".../results.json",
     "select": [test ids or files], "args": [pytest arguments]}

The results file is written when the session finishes; a process that ends
before that leaves none, and the harness counts the trial as a miss.
Stdlib and pytest only; works with Python >= 3.6 and pytest >= 6.
"""

import json
import os
import sys


def main() -> None:
    spec = json.loads(sys.stdin.read())
    sys.stdin.close()
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    import deltarun_results

    del sys.path[0]
    # The repository root first on the import path, as `python -m pytest` run from it.
    sys.path.insert(0, spec["rootdir"])
    import pytest

    recorder = deltarun_results.Recorder(spec["nonce"], spec["results"], spec["select"])
    code = pytest.main(list(spec["args"]), plugins=[recorder])
    sys.stdout.flush()
    sys.exit(int(code))


if __name__ == "__main__":
    main()
