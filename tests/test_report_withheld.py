"""Withheld means withheld, and missing is null: a report whose checklist fails two or more
integrity rows keeps every number of the comparison out of its publishable parts (report.md,
report.html, report.json) and says what may be published instead (seed 004's decision
table); a token count nobody measured is null and "not metered", never 0."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.conftest import run_cli
from tests.test_report_input import make_run

TASKS = [f"t{i}" for i in range(4)]


def test_a_withheld_report_publishes_no_number_of_the_comparison(tmp_path: Path) -> None:
    from runner.records import Outcome

    run = make_run(tmp_path, outcomes={t: (Outcome.MISS, Outcome.SUCCESS) for t in TASKS})
    assert run_cli("report", str(run)).returncode == 0
    report = json.loads((run / "report.json").read_text())
    assert report["headline_withheld"] is True
    for key in ("arms", "deltas", "baseline_legs", "metric_deltas"):
        assert report[key] == [], key
    assert report["repeats"] == {} and report["covariates"] == {} and "cost" not in report
    held = report["withheld_for_author"]
    assert held["note"].startswith("withheld: two or more checklist rows fail")
    assert held["deltas"][0]["aggregate_delta"]["mean"] == 1.0  # kept for the author
    failing = {r["item"] for r in report["checklist"] if not r["ok"]}
    instead = {x["row"]: x["publish"] for x in report["publish_instead"]}
    assert instead["suite digest matches"] == "demo, suite unpinned"
    assert set(instead) <= failing and len(instead) >= 2
    # report.md: the headline says what to publish; every rate comes after the warning.
    text = (run / "report.md").read_text()
    warning = text.index("## Withheld numbers: for the author, not for publication")
    assert "- what may be published instead (seed 004's decision table):" in text
    assert "  - suite digest matches: demo, suite unpinned" in text
    assert not re.search(r"\d+\.\d%", text[:warning]), text[:warning]
    assert "+100.0 pp" in text[warning:]
    html = (run / "report.html").read_text()
    banner = html.index("Withheld numbers: for the author, not for publication")
    assert "+100.0" not in html[:banner] and "+100.0" in html[banner:]
    assert run_cli("replay", str(run)).returncode == 0  # the same bytes again


def test_tokens_nobody_metered_are_null_and_not_metered(tmp_path: Path) -> None:
    from runner.records import Outcome

    run = make_run(tmp_path, outcomes={"a": (Outcome.MISS, Outcome.SUCCESS)})
    assert run_cli("report", str(run)).returncode == 0
    held = json.loads((run / "report.json").read_text())["withheld_for_author"]
    for arm in held["arms"]:  # the scripted arms report no tokens
        assert arm["tokens_per_pass"] is None and arm["tokens_metered"] is False, arm
    text = (run / "report.md").read_text()
    assert "| not metered |" in text  # the Arms table, under the withheld heading
    assert "| 0.0 |" not in text
