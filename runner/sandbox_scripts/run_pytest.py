"""Start pytest for the verify phase the way the harness decides, and report its results.

Runs in the verify sandbox as the test's uid with the image's python3:
``python3 -B -s run_pytest.py < spec.json``. The spec comes on standard input
(read, then closed, before any code under test is imported)::

    {"channel": ".../channel.sock", "rootdir": "/workspace",
     "paths": [the project's package folders, after the root on the import path],
     "user_site": whether the task's install step put the project in the user site,
     "select": [test ids, files or classes: the declared tests and the canaries, as one],
     "args": [pytest arguments]}

Before anything of the workspace is imported, it connects to the harness's
collector (``collector.py``, another uid) and says ``start``; the plugin
(``deltarun_results.py``) then sends each outcome on that socket as pytest
learns it. A process that ends early leaves its records incomplete, and the
harness counts the trial as a miss. Stdlib and pytest only; Python >= 3.6, pytest >= 6.
"""

import os
import sys


def main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    import deltarun_channel
    import deltarun_results

    del sys.path[0]
    spec, channel = deltarun_channel.start()
    # The repository root first on the import path, as `python -m pytest` run from it, then
    # the folders the project's packaging metadata declares (a src/ layout), as an install
    # would (pytest itself was imported from the image by the plugin, before this).
    sys.path[0:0] = [spec["rootdir"], *spec.get("paths", [])]
    deltarun_channel.add_user_site(spec)
    import pytest

    recorder = deltarun_results.Recorder(channel, spec["select"])
    code = pytest.main(list(spec["args"]), plugins=[recorder])
    sys.stdout.flush()
    sys.exit(int(code))


if __name__ == "__main__":
    main()
