"""Opening a large run in ``deltarun view``: time to a drawn matrix page against the time to
read and parse ``trials.jsonl``.

Writes a synthetic run of 10,000 trials (1,000 tasks x 2 arms x 5 repeats; each record with
a patch and a verify log of a few KB, as a real run's), then measures on this machine:

- parse: reading ``trials.jsonl`` and validating every record (``RunDir.trials()``), what a
  person's own script or ``deltarun report`` pays before showing anything;
- served: ``deltarun view RUN --port 0`` started, then headless Chromium loading its URL
  until the matrix is in the DOM (the server indexes the ledger on that first request);
- bundle: the same page opened from a ``--bundle`` folder (``file://``, no server);
- blank: Chromium loading an empty page, the browser's own start-up in the figures above.

It prints each time and the ratio served/parse (the goal: the page is open in under 2 s,
logs and steps staying in the ledger until a trial is shown).

    python bench/view_open.py [--trials 10000] [--smoke]

``--smoke``: 40 trials, a check that the benchmark runs; its figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import smoke  # noqa: E402
from runner.store.rundir import RunDir  # noqa: E402

QUICKSTART = ROOT / "tests" / "fixtures" / "run-quickstart"
ARMS = ("ctrl", "cand")
REPEATS = 5
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync"]


def write_run(root: Path, trials: int) -> Path:
    """A run directory of ``trials`` records made from one of the quickstart run's."""
    run = root / "run"
    run.mkdir()
    meta = json.loads((QUICKSTART / "run.json").read_text())
    template = json.loads((QUICKSTART / "trials.jsonl").read_text().splitlines()[0])
    template["verify_log"] = ("tests/test_x.py::test_case PASSED\n" * 120)[:4000]
    tasks = max(1, trials // (len(ARMS) * REPEATS))
    meta["arms"], meta["control_arm"] = list(ARMS), ARMS[0]
    meta["tasks"] = [
        {"id": f"task-{n:05d}", "kind": "ordinary", "grading": "pytest"} for n in range(tasks)
    ]
    meta["controls_path"] = ""
    (run / "run.json").write_text(json.dumps(meta))
    shutil.copy(QUICKSTART / "controls.yaml", run / "controls.yaml")
    with (run / "trials.jsonl").open("w") as handle:
        for number in range(trials):
            task, rest = divmod(number, len(ARMS) * REPEATS)
            arm, repeat = divmod(rest, REPEATS)
            passed = (number * 7919) % 3 == 0
            record = {
                **template,
                "task_id": f"task-{task % tasks:05d}",
                "arm": ARMS[arm],
                "repeat": repeat,
                "job_id": f"{number:064x}",
                "passed": passed,
                "outcome": "success" if passed else "miss",
            }
            handle.write(json.dumps(record) + "\n")
    return run


def chromium_open(url: str, profile: Path) -> tuple[float, str]:
    """Seconds for headless Chromium to load ``url`` and dump its DOM; the DOM."""
    exe = shutil.which("chromium")
    if exe is None:
        sys.exit("chromium is missing; run `bash scripts/ensure-chromium.sh`")
    start = time.perf_counter()
    done = subprocess.run(
        [exe, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return time.perf_counter() - start, done.stdout


def served(run: Path, profile: Path) -> float:
    """Seconds to open the matrix of ``deltarun view RUN`` once it prints its URL."""
    exe = Path(sys.executable).parent / "deltarun"
    command = [str(exe), "view", str(run), "--port", "0"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as server:
        try:
            assert server.stdout is not None
            url = re.search(r"(http://\S+)", server.stdout.readline())
            assert url is not None, "deltarun view printed no URL"
            seconds, dom = chromium_open(url.group(1), profile)
            assert "<tr data-task=" in dom, "the matrix was not drawn"
            return seconds
        finally:
            server.terminate()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--trials", type=int, default=10_000)
    smoke.add_flag(parser)
    args = parser.parse_args()
    trials = 40 if args.smoke else args.trials
    if args.smoke:
        smoke.announce("view", f"{trials} trials")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        run = write_run(root, trials)
        start = time.perf_counter()
        parsed = len(RunDir(run).trials())
        parse_s = time.perf_counter() - start
        assert parsed == trials
        served_s = served(run, root / "profile")
        bundle = root / "bundle"
        subprocess.run(
            [
                str(Path(sys.executable).parent / "deltarun"),
                "view",
                str(run),
                "--bundle",
                str(bundle),
            ],
            check=True,
            capture_output=True,
        )
        bundle_s, dom = chromium_open((bundle / "index.html").as_uri(), root / "profile")
        assert "<tr data-task=" in dom
        (root / "blank.html").write_text("<!DOCTYPE html><p>blank</p>")
        blank_s, _ = chromium_open((root / "blank.html").as_uri(), root / "profile")
    print(f"view: parse trials.jsonl ({trials} records, RunDir.trials()): {parse_s:.2f} s")
    print(f"view: open the matrix served (deltarun view, Chromium): {served_s:.2f} s")
    print(f"view: open the matrix from a bundle (file://, Chromium): {bundle_s:.2f} s")
    print(f"view: Chromium on a blank page (start-up, included above): {blank_s:.2f} s")
    print(f"view: ratio served/parse {served_s / parse_s:.2f} (goal: served < 2 s)")


if __name__ == "__main__":
    main()
