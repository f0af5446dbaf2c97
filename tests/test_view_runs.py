"""``deltarun view`` on runs made for real through the command line and Docker, opened in
headless Chromium: the verdicts ``replay --reverify`` changed, filtered and marked; a new
run's report.html linking into the viewer while old and new runs replay byte for byte; a
run with an ``openai`` model-loop arm against the fake endpoint (tests/fake_openai.py),
its steps with their tokens, its patch and its verify log.

Screenshots are kept like tests/test_view_browser.py's (under tmp_path, copied to
/work/view-artifacts/).
"""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from runner.hashing import sha256_file
from runner.view.source import RunSource
from tests.conftest import made_once, run_cli
from tests.fake_openai import FakeModel, Step, call, reply
from tests.helpers import ADD_GOLD, make_suite, repo_task
from tests.test_run_cli import gold_suite, ledger
from tests.test_view_browser import bundle, dom, screenshot, side

pytestmark = pytest.mark.docker

REPORTS = ("report.md", "report.json", "report.html", "scorecard.json")
ROWS = re.compile(r'<tr data-task="([^"]+)"')


def report_bytes(run: Path) -> dict[str, bytes]:
    return {name: (run / name).read_bytes() for name in REPORTS if (run / name).exists()}


@pytest.fixture(scope="module")
def gold_run(tmp_path_factory: pytest.TempPathFactory, docker_api: Any) -> Path:
    """A new run made as tests/test_run_cli.py makes one: two tasks, a no-op control and
    gold patches; made once per session, each test works on a copy."""
    return made_once(tmp_path_factory, "view-runs-gold", _gold_run) / "run"


def _gold_run(root: Path) -> None:
    out = root / "run"
    done = run_cli("run", str(gold_suite(root)), "--out", str(out), "-j", "2")
    assert done.returncode == 0, done.stderr
    # The run wrote the viewer's pages where its report.html links, and said where.
    assert f"viewer: {out / 'view' / 'index.html'} (4 trials)" in done.stdout, done.stdout
    assert (out / "view" / "data" / "index.js").is_file()


def copy_of(run: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    return copy


def test_reverify_keeps_what_changed_and_the_viewer_filters_it(
    gold_run: Path, tmp_path: Path
) -> None:
    run = copy_of(gold_run, tmp_path)
    reports = report_bytes(run)
    clean = run_cli("replay", str(run), "--reverify")
    assert clean.returncode == 0, clean.stderr
    assert "reverify: 4 verdicts re-run, 0 changed" in clean.stdout
    assert f"reverify: kept in {run / 'reverify.json'}" in clean.stdout
    assert report_bytes(run) == reports  # no byte of the report moved
    kept = json.loads((run / "reverify.json").read_text())
    assert (kept["checked"], kept["changed"]) == (4, {})
    assert kept["ledger_sha256"] == sha256_file(run / "trials.jsonl") and kept["ran_at"]
    assert RunSource(run).index()["reverify"]["changed"] == 0
    # A record whose verdict no longer matches its patch (as test_run_cli edits one).
    lines = (run / "trials.jsonl").read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if json.loads(line)["arm"] == "ctrl")
    edited = json.loads(lines[at])
    edited.update(passed=True, outcome="success")
    lines[at] = json.dumps(edited)
    (run / "trials.jsonl").write_text("\n".join(lines) + "\n")
    flagged = run_cli("replay", str(run), "--accept-edits", "--reverify")
    assert flagged.returncode == 0, flagged.stderr
    assert "reverify: 4 verdicts re-run, 1 changed" in flagged.stdout
    kept = json.loads((run / "reverify.json").read_text())
    assert kept["changed"] == {
        edited["job_id"]: {
            "task_id": edited["task_id"], "arm": "ctrl", "repeat": 0,
            "was": "success", "now": "miss",
        }
    }  # fmt: skip
    # The file changes nothing a replay or an export reads.
    reports = report_bytes(run)
    again = run_cli("replay", str(run))
    assert again.returncode == 0 and "identical" in again.stdout, again.stderr
    assert report_bytes(run) == reports
    kit = run_cli("export", str(run), "--kit", str(tmp_path / "kit"))
    assert kit.returncode == 0, kit.stderr
    assert not (tmp_path / "kit" / "run" / "reverify.json").exists()
    # The viewer: the filter keeps the one task, its cell is marked, the pages say what changed.
    task = edited["task_id"]
    page = bundle(tmp_path, run).as_uri()
    matrix = dom(tmp_path, page)
    assert 'id="f-rv"' in matrix and len(ROWS.findall(matrix)) == 2
    changed = dom(tmp_path, page + "#/?rv=changed")
    assert ROWS.findall(changed) == [task]
    assert 'data-rv="changed"' in changed and "success \u2192 miss</span>" in changed
    assert ROWS.findall(dom(tmp_path, page + "#/?rv=fails")) == [task]
    assert ROWS.findall(dom(tmp_path, page + "#/?rv=passes")) == []
    assert ROWS.findall(dom(tmp_path, page + "#/?rv=changed&arm=gold")) == []
    shown = dom(tmp_path, page + f"#/task/{task}")
    assert "re-verified: recorded success, now miss" in side(shown, "a")
    assert "re-verified" not in side(shown, "b")
    run_page = dom(tmp_path, page + "#/run")
    assert "4 verdict(s) re-run, 1 changed" in run_page
    assert f'href="#/task/{task}?ra=0"' in run_page
    screenshot(tmp_path, page + "#/?rv=changed", "view-reverify-matrix")


def test_a_new_run_links_its_report_into_the_viewer(gold_run: Path, tmp_path: Path) -> None:
    """New runs record run.json's view_bundle, so their report.html links to
    view/index.html; the link is part of what replay rebuilds byte for byte (old runs,
    without the field, have none: tests/test_view.py and tests/test_replay_fixtures.py)."""
    from playwright.sync_api import sync_playwright

    from tests.test_report_html import CHROMIUM_FLAGS, chromium

    run = copy_of(gold_run, tmp_path)
    assert json.loads((run / "run.json").read_text())["view_bundle"] == "view"
    report = (run / "report.html").read_text(encoding="utf-8")
    assert '<a href="view/index.html">view/index.html</a>' in report
    assert "deltarun view RUN --bundle RUN/view" in report
    reports = report_bytes(run)
    shutil.rmtree(run / "view")
    written = run_cli("report", str(run))  # `report` writes them again
    assert written.returncode == 0 and "viewer: " in written.stdout, written.stderr
    assert report_bytes(run) == reports
    written = run_cli("view", str(run), "--bundle", str(run / "view"))  # and so does `view`
    assert written.returncode == 0, written.stderr
    replayed = run_cli("replay", str(run))  # the bundle beside it changes nothing either
    assert replayed.returncode == 0 and "identical" in replayed.stdout, replayed.stderr
    assert report_bytes(run) == reports
    assert RunSource(run).index()["reverify"] is None  # never re-verified: no filter
    flags = [f for f in CHROMIUM_FLAGS if f != "--headless"]
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=chromium(), args=flags)
        try:
            page = browser.new_page()
            page.goto((run / "report.html").as_uri())
            page.click('a[href="view/index.html"]')
            page.wait_for_selector("tr[data-task]")
            assert page.url.startswith((run / "view" / "index.html").as_uri())
            assert page.locator("tr[data-task]").count() == 2
            assert page.locator("#f-rv").count() == 0 and page.locator("#f-vs").count() == 1
            page.screenshot(path=str(tmp_path / "view-from-report.png"))
        finally:
            browser.close()


# ---------------------------------------------------------------- an openai arm

WRONG = ADD_GOLD.replace("+    return a + b", "+    return a * b")  # a patch that misses
USAGE = [(120, 10), (150, 40), (200, 8), (260, 5)]


def confident_but_wrong(body: dict[str, Any], index: int) -> Step:
    """Reads the file, patches it wrongly, runs the visible test (which passes), submits."""
    turn = sum(m["role"] == "assistant" for m in body["messages"])
    calls = [
        call("read_file", {"path": "calc/__init__.py"}),
        call("apply_patch", {"patch": WRONG}),
        call("run_tests", {}),
        call("submit", {}),
    ]
    content = "Multiplying should do it." if turn == 1 else None
    return reply(calls[min(turn, 3)], content=content, usage=USAGE[min(turn, 3)])


def test_an_openai_arm_shows_its_steps_tokens_patch_and_failing_test(
    tmp_path: Path, docker_api: Any
) -> None:
    with FakeModel(confident_but_wrong) as fake:
        controls = make_suite(
            tmp_path,
            [repo_task("t1"), repo_task("t2")],
            [
                {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
                {"name": "model", "agent": {"type": "openai", "max_turns": 8}},
            ],
            tools={
                "allowlist": ["read_file", "apply_patch", "run_tests", "list_dir"],
                "forbidden_paths": [".git/"],
                "call_timeout_s": 20,
            },
            route={"base_url": fake.base_url, "model": "qwen-test", "max_attempts": 2},
        )
        done = run_cli("run", str(controls), "--out", str(tmp_path / "run"), "-j", "2")
    assert done.returncode == 0, done.stderr
    run = tmp_path / "run"
    record = next(r for r in ledger(run) if r["arm"] == "model" and r["task_id"] == "t1")
    assert record["outcome"] == "miss" and record["stop_reason"] == "submit"
    assert record["prompt_tokens"] == sum(p for p, _ in USAGE)
    page = bundle(tmp_path, run).as_uri()
    url = page + "#/task/t1?b=model"
    right = side(dom(tmp_path, url), "b")
    # The model loop's steps, each reply with its own tokens, summing to the record's.
    titles = re.findall(r'<summary>(\d+\. [^<]*)(?:<span class="tokens">([^<]*)</span>)?', right)
    assert [t for t, _ in titles] == [
        "1. system", "2. user",
        "3. assistant → read_file", "4. tool read_file",
        "5. assistant → apply_patch", "6. tool apply_patch",
        "7. assistant → run_tests", "8. tool run_tests",
        "9. assistant → submit", "10. tool submit",
    ]  # fmt: skip
    assert [tokens for _, tokens in titles if tokens] == [f"{p} in · {c} out" for p, c in USAGE]
    total = f"{record['prompt_tokens']} in, {record['completion_tokens']} out in all"
    assert total in right
    assert "patch:\n" + html.escape(WRONG, quote=False) in right  # the call, readable
    assert "Multiplying should do it." in right
    # The patch as a diff, the failing test picked out, the harness's canary set apart.
    assert '<span class="add">+    return a * b</span>' in right
    failing = re.findall(r'<li class="failing">([^<]*)</li>', right)
    assert failing == ["tests/test_hidden.py::test_add"]
    assert '<p class="note canaries">' in right and "canaries the harness planted" in right
    marked = re.findall(r'<span class="mark">([^<]*)</span>', right)
    assert marked and all("test_add" in line for line in marked)
    assert "730" in right and "stop: submit" in right
    screenshot(tmp_path, url, "view-openai-task", height=2800)  # down to the steps


def test_a_reverify_whose_file_cannot_be_kept_still_says_what_changed(
    gold_run: Path, tmp_path: Path
) -> None:
    """reverify.json cannot be written (a folder holds its name): the re-run's findings are
    printed, the report is untouched, exit 0, and one line says what was not kept."""
    run = copy_of(gold_run, tmp_path)
    (run / "reverify.json").mkdir()
    done = run_cli("replay", str(run), "--reverify")
    assert done.returncode == 0, done.stderr
    assert "reverify: 4 verdicts re-run, 0 changed" in done.stdout
    assert "reverify: not kept for the viewer: " in done.stdout
    assert "reverify.json" in done.stdout.split("not kept for the viewer: ", 1)[1]
