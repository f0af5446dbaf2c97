"""report.html: a pure, deterministic, self-contained page; rendered for real in headless Chromium."""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from runner.report.html import render_html

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
EVIL = "<script>alert(1)</script>"
PLOTS = ("forest", "passrates", "strip", "cost")


def rate(k: int, n: int, lo: float | None = None, hi: float | None = None) -> dict[str, Any]:
    if n == 0:
        return {"k": 0, "n": 0, "value": None, "wilson95": None}
    return {"k": k, "n": n, "value": round(k / n, 6), "wilson95": [lo, hi]}


def arm(
    name: str, k: int, n: int, lo: float | None, hi: float | None, **extra: Any
) -> dict[str, Any]:
    return {
        "arm": name,
        "control": extra.pop("control", False),
        "trials": n,
        "n": n,
        "passes": k,
        "pass_rate": rate(k, n, lo, hi),
        "timeout_rate": rate(0, n, 0.0, 0.3),
        "tool_violation_rate": rate(1, n, 0.01, 0.4) if n else rate(0, 0),
        "error_rate": rate(0, n, 0.0, 0.3),
        "tokens_per_pass": extra.pop("tokens", None),
        "wall_s_per_task": extra.pop("wall", None),
        "retries_mean": 0.0,
        "tool_calls_mean": 1.0,
        "refusal": {
            "abstention_accuracy": rate(1, 2, 0.09, 0.91) if n else rate(0, 0),
            "invalid_completion_rate": rate(1, 2, 0.09, 0.91) if n else rate(0, 0),
            "false_abstention_rate": rate(0, n, 0.0, 0.3),
        },
        "outcomes": {"success": k, "miss": n - k},
    }


def case(task: str, delta: float | None, control: str, candidate: str) -> dict[str, Any]:
    score = {"pass": 1.0, "fail": 0.0}
    return {
        "case_id": task,
        "control_status": control,
        "candidate_status": candidate,
        "control_score": score.get(control),
        "candidate_score": score.get(candidate),
        "delta": delta,
    }


def delta(candidate: str, agg: dict[str, Any], cases: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "control_arm": "ctrl",
        "candidate_arm": candidate,
        "aggregate_delta": agg,
        "per_case": cases,
    }


def synthetic_report() -> dict[str, Any]:
    tasks = [f"task-{i:02d}" for i in range(8)]
    helped = [
        case(t, 1.0 if i < 5 else 0.0, "fail", "pass" if i < 5 else "fail")
        for i, t in enumerate(tasks)
    ]
    hurt = [
        case(t, -1.0 if i < 3 else 0.0, "pass", "fail" if i < 3 else "pass")
        for i, t in enumerate(tasks[:7])
    ]
    hurt.append(case(tasks[7], None, "pass", "inconclusive"))
    agg = {"n_tasks": 8, "sd": 0.5, "same": 3, "inconclusive": 0, "ci_method": "newcombe-paired"}
    return {
        "schema_version": 1,
        "stamp": "exploratory — not for publication",
        "edited": None,
        "verdict": "demo",
        "headline_withheld": False,
        "checklist": [
            {"item": "suite digest matches", "ok": True, "detail": "abc = abc"},
            {"item": "channel scored", "ok": False, "detail": "channel is exploratory"},
        ],
        "pins": {
            "protocol_id": "synthetic-1",
            "protocol_sha256": "a" * 64,
            "suite_sha256": "b" * 64,
            "channel": "exploratory",
            "run_id": "synthetic-1-run",
            "control_arm": "ctrl",
            "image_digests": {"deltarun/sandbox-python:bookworm": "sha256:" + "c" * 64},
            "agent_dir_digests": {"cand": "d" * 64},
            "ledger_sha256": "e" * 64,
            "deltarun_version": "0.1.0",
            "python_version": "3.11.7",
        },
        "arms": [
            arm("ctrl", 3, 8, 0.137, 0.694, control=True, wall=1.5, tokens=800.0),
            arm("cand", 7, 8, 0.529, 0.978, wall=2.25, tokens=1200.5),
            arm(EVIL, 1, 8, 0.022, 0.471, wall=0.75, tokens=400.0),
            arm("empty", 0, 0, None, None),  # n = 0: no rate, no interval, no cost
        ],
        "deltas": [
            delta(
                "cand",
                {
                    **agg,
                    "mean": 0.625,
                    "ci95": [0.2, 1.0],
                    "mde": 0.4512,
                    "mcnemar_p": 0.0625,
                    "helped": 5,
                    "hurt": 0,
                },
                helped,
            ),
            delta(
                EVIL,
                {
                    **agg,
                    "mean": -0.375,
                    "ci95": [-0.8, 0.05],
                    "mcnemar_p": 0.25,
                    "helped": 0,
                    "hurt": 3,
                    "inconclusive": 1,
                },
                hurt,
            ),
            delta(
                "empty",
                {
                    "n_tasks": 0,
                    "mean": None,
                    "sd": None,
                    "ci95": None,
                    "mcnemar_p": None,
                    "helped": 0,
                    "hurt": 0,
                    "same": 0,
                    "inconclusive": 8,
                },
                [],
            ),
        ],
        "per_task": {
            t: {"ctrl": ["miss"], "cand": ["success"], EVIL: ["timeout" if i == 0 else "miss"]}
            for i, t in enumerate(tasks)
        },
        "some_future_key": {"ignored": True},
    }


def test_page_has_the_four_plots_each_labelled() -> None:
    page = render_html(synthetic_report())
    assert page.startswith("<!DOCTYPE html>")
    for plot in PLOTS:
        assert f'class="plot {plot}"' in page
    svgs = re.findall(r"<svg [^>]*>", page)
    assert len(svgs) == len(PLOTS)
    assert all('role="img"' in s and 'aria-label="' in s for s in svgs)


def test_page_is_self_contained() -> None:
    page = render_html(synthetic_report())
    assert "http://" not in page and "https://" not in page
    assert not re.search(r"<(script|link|iframe|object|embed)\b", page, re.IGNORECASE)
    assert not re.search(r"\b(src|href)\s*=", page, re.IGNORECASE)
    assert "default-src 'none'" in page  # the CSP forbids any fetch a future edit might add


def test_every_value_is_escaped() -> None:
    page = render_html(synthetic_report())
    assert EVIL not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_output_is_deterministic_and_input_untouched() -> None:
    report = synthetic_report()
    before = copy.deepcopy(report)
    first = render_html(report)
    assert render_html(copy.deepcopy(report)) == first
    assert report == before


def test_headline_is_paired_and_handles_missing_values() -> None:
    page = render_html(synthetic_report())
    assert (
        "+62.5 pp pass rate (95% CI +20.0 to +100.0 pp, Newcombe paired score), n = 8 tasks, "
        "McNemar p = 0.0625, detectable at 80% power: ±45.1 pp" in page
    )
    # No metric alone: the refusal slice (here: not measured) and the cost beside it.
    assert "refusal slice: not measured (the run has no negative-control task)" in page
    assert "cost: 1200 vs 800 tokens per pass, 2.2 s vs 1.5 s wall per task" in page
    assert "-37.5 pp pass rate (95% CI -80.0 to +5.0 pp, Newcombe paired score)" in page
    assert "no paired tasks (inconclusive 8)" in page
    assert "n/a (n=0)" in page  # the empty arm's rates
    assert "Verdict: demo (failing: channel scored)" in page
    assert "some_future_key" not in page


def test_withheld_headline_prints_no_number() -> None:
    report = synthetic_report()
    report["headline_withheld"] = True
    headline = render_html(report).split("<h2>Headline</h2>")[1].split("<h2>")[0]
    assert "Withheld" in headline and "pp" not in headline


def test_a_minimal_report_renders() -> None:
    page = render_html({})
    for plot in PLOTS:
        assert f'class="plot {plot}"' in page


# ---------------------------------------------------------------- headless Chromium

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-logging=stderr",  # console messages reach stderr only with this
]


def chromium() -> str:
    exe = shutil.which("chromium")
    if exe is None:
        message = "chromium is missing; run `bash scripts/ensure-chromium.sh`"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return exe


def run_chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    profile = tmp_path / "profile"
    command = [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def console_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]


def test_console_errors_are_seen(tmp_path: Path) -> None:
    """The console check below is live: a page with a script error shows in stderr."""
    page = tmp_path / "broken.html"
    page.write_text("<!DOCTYPE html><p>x</p><script>undefinedFunction();</script>")
    done = run_chromium(tmp_path, "--dump-dom", page.as_uri())
    assert any("Uncaught" in line for line in console_lines(done.stderr)), done.stderr


def test_page_renders_in_headless_chromium(tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    page.write_text(render_html(synthetic_report()), encoding="utf-8")
    shot = tmp_path / "shot.png"

    done = run_chromium(tmp_path, f"--screenshot={shot}", "--window-size=1280,2000", page.as_uri())
    assert done.returncode == 0, done.stderr
    assert shot.exists() and shot.stat().st_size > 10_000
    assert console_lines(done.stderr) == []

    dom = run_chromium(tmp_path, "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr
    for plot in PLOTS:
        assert f'class="plot {plot}"' in dom.stdout
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom.stdout
    # The page has no script, so any console line (an error, a blocked fetch) is a fault.
    assert console_lines(dom.stderr) == []
