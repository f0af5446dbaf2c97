"""Answer-task metrics one by one, paired per task; checked against NumPy."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from runner.records import Outcome, TaskKind, Trial
from runner.report.metric_deltas import metric_deltas
from tests.test_scoring import trial

METRICS = ("exact_match", "json_schema_ok", "within_deadline")


def test_each_metric_is_paired_per_task_and_matches_numpy() -> None:
    rng = random.Random(3)
    trials = []
    held: dict[tuple[str, str, str], list[bool]] = {}
    for i in range(9):
        task = f"a{i}"
        for arm in ("ctrl", "cand"):
            for repeat in range(2):
                results = {m: rng.random() < (0.7 if arm == "cand" else 0.4) for m in METRICS}
                answered = rng.random() < 0.85
                for m in METRICS:  # an unscored answer holds no metric
                    held.setdefault((arm, task, m), []).append(answered and results[m])
                outcome = Outcome.SUCCESS if answered and all(results.values()) else Outcome.MISS
                trials.append(
                    trial(task, arm, outcome, repeat=repeat, metrics=results if answered else None)
                )
    # Every task needs one scored trial to name its metrics; an errored one counts nowhere.
    trials.append(trial("a0", "cand", Outcome.ERROR, repeat=2, metrics={m: True for m in METRICS}))
    trials.append(trial("r0", "cand", Outcome.SUCCESS))  # a repository task: no metrics
    trials.append(trial("n0", "cand", Outcome.ABSTAIN_OK, kind=TaskKind.NEGATIVE))
    rows = {m.metric: m for m in metric_deltas(trials, ["cand"], "ctrl")}
    assert sorted(rows) == sorted(METRICS)
    for metric, row in rows.items():
        tasks = sorted({t for (_, t, m) in held if m == metric})
        ctrl = np.array([np.mean(held[("ctrl", t, metric)]) for t in tasks])
        cand = np.array([np.mean(held[("cand", t, metric)]) for t in tasks])
        assert row.n_tasks == len(tasks) == 9
        assert row.control_mean == pytest.approx(ctrl.mean(), abs=1e-12)
        assert row.candidate_mean == pytest.approx(cand.mean(), abs=1e-12)
        assert row.delta == pytest.approx((cand - ctrl).mean(), abs=1e-12)
        assert row.sd == pytest.approx((cand - ctrl).std(ddof=1), abs=1e-12)


def test_no_answer_tasks_no_rows() -> None:
    trials = [trial("r0", arm, Outcome.MISS) for arm in ("ctrl", "cand")]
    assert metric_deltas(trials, ["cand"], "ctrl") == []


def test_the_report_shows_each_metric_under_its_module_and_digest(tmp_path: Path) -> None:
    from runner.report.assemble import build_report
    from runner.store.rundir import RunDir
    from tests.helpers import comparison
    from tests.test_report_input import make_run

    path = make_run(tmp_path, outcomes={"q": (Outcome.MISS, Outcome.SUCCESS)})
    run = RunDir(path)
    lines = (path / "trials.jsonl").read_text().splitlines()
    ctrl, cand = (Trial.model_validate_json(line) for line in lines)
    ctrl = ctrl.model_copy(update={"metrics": {"exact_match": False, "json_schema_ok": True}})
    cand = cand.model_copy(update={"metrics": {"exact_match": True, "json_schema_ok": True}})
    (path / "trials.jsonl").write_text(
        ctrl.model_dump_json() + "\n" + cand.model_dump_json() + "\n"
    )
    built = build_report(run)
    report = comparison(json.loads(built.json_text))
    exact = next(m for m in report["metric_deltas"] if m["metric"] == "exact_match")
    assert (exact["control"], exact["candidate"], exact["delta"], exact["n_tasks"]) == (
        0.0,
        1.0,
        1.0,
        1,
    )
    assert exact["module"] == "runner/metrics.py (built-in)"
    assert "## Answer metrics" in built.markdown and "`exact_match`" in built.markdown
    assert "<h2>Answer metrics</h2>" in built.html
