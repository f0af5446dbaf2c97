"""``deltarun view`` as a person uses it: the pages of a real run opened in headless
Chromium (as files from a bundle, and served), the side-by-side view checked for the
expected patch and failing test, hostile records checked to render as inert text.

A screenshot of each page is kept under the test's tmp_path and copied to
/work/view-artifacts/ (when that folder can be made). Interaction is driven through the
URL fragment, which is where the page keeps its state (filters, arms, repeats): the
controls only rewrite it. With CI=true a missing chromium fails (tests.test_report_html).
"""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path
from urllib.parse import quote

from runner.view.source import RunSource
from runner.view.text import failing_tests
from tests.conftest import run_cli
from tests.test_report_html import console_lines, run_chromium
from tests.test_view import EVIL, copy_run, hostile_run, ledger, start_server, stop

ARTIFACTS = Path("/work/view-artifacts")
WAIT = "--virtual-time-budget=8000"  # the page loads trial data after its load event


def dom(tmp_path: Path, url: str) -> str:
    done = run_chromium(tmp_path, WAIT, "--dump-dom", url)
    assert done.returncode == 0, done.stderr
    assert console_lines(done.stderr) == [], console_lines(done.stderr)
    return done.stdout


def screenshot(tmp_path: Path, url: str, name: str, height: int = 1600) -> Path:
    shot = tmp_path / f"{name}.png"
    size = f"--window-size=1400,{height}"
    done = run_chromium(tmp_path, WAIT, f"--screenshot={shot}", size, url)
    assert done.returncode == 0, done.stderr
    assert shot.is_file() and shot.stat().st_size > 10_000
    try:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, ARTIFACTS / shot.name)
    except OSError:
        pass  # the copy is a convenience; the artifact under tmp_path is the test's
    return shot


def bundle(tmp_path: Path, run: Path) -> Path:
    out = tmp_path / "bundle"
    done = run_cli("view", str(run), "--bundle", str(out))
    assert done.returncode == 0, done.stderr
    return out / "index.html"


def side(page: str, name: str) -> str:
    """The HTML of one side of the task page."""
    start = page.index(f'id="side-{name}"')
    end = page.find('id="side-b"', start + 1) if name == "a" else len(page)
    return page[start:end]


def test_side_by_side_shows_the_patch_and_the_failing_test(tmp_path: Path) -> None:
    run = copy_run(tmp_path)
    records = ledger(run)
    # A task where the candidate changed something and still failed a test.
    chosen = next(
        r for r in records if r["arm"] == "candidate" and r["patch"] and not r["passed"]
        and failing_tests(r["verify_log"])
    )  # fmt: skip
    control = next(
        r for r in records if r["task_id"] == chosen["task_id"] and r["arm"] == "frozen-stub-v1"
    )
    page = bundle(tmp_path, run)
    url = page.as_uri() + f"#/task/{quote(chosen['task_id'])}?b=candidate"
    shown = dom(tmp_path, url)
    left, right = side(shown, "a"), side(shown, "b")
    assert 'value="frozen-stub-v1" selected=""' in left and 'value="candidate" selected=""' in right
    added = next(line for line in chosen["patch"].splitlines() if line.startswith("+ "))
    assert f'<span class="add">{html.escape(added, quote=False)}</span>' in right
    first = failing_tests(chosen["verify_log"])[0]
    assert f'<li class="failing">{html.escape(first, quote=False)}</li>' in right
    assert '<span class="mark">' in right
    assert control["outcome"] in left and "no patch" in left
    screenshot(tmp_path, url, "view-task")


def test_matrix_and_run_pages_and_filters(tmp_path: Path) -> None:
    run = copy_run(tmp_path)
    page = bundle(tmp_path, run)
    index = RunSource(run).index()
    shown = dom(tmp_path, page.as_uri())
    rows = re.findall(r'<tr data-task="([^"]+)"', shown)
    assert rows == [row["id"] for row in index["rows"]]
    assert 'class="vs helped">helped<' in shown
    helped = [row["id"] for row in index["rows"] if row["vs"]["candidate"] == "helped"]
    filtered = dom(tmp_path, page.as_uri() + "#/?vs=helped&arm=candidate")
    assert re.findall(r'<tr data-task="([^"]+)"', filtered) == helped
    tagged = index["rows"][0]["tags"][0]
    by_tag = dom(tmp_path, page.as_uri() + "#/?tag=" + quote(tagged))
    want = [row["id"] for row in index["rows"] if tagged in row["tags"]]
    assert re.findall(r'<tr data-task="([^"]+)"', by_tag) == want
    word = "pre-release"  # in one prompt only, not in any task id
    searched = dom(tmp_path, page.as_uri() + "#/?q=" + quote(word))
    want = [row["id"] for row in index["rows"] if word in (row["prompt"] or "").lower()]
    assert want and re.findall(r'<tr data-task="([^"]+)"', searched) == want
    screenshot(tmp_path, page.as_uri(), "view-matrix")
    report = json.loads((run / "report.json").read_text())
    run_page = dom(tmp_path, page.as_uri() + "#/run")
    assert html.escape(report["checklist"][0]["item"], quote=False) in run_page
    assert report["pins"]["suite_sha256"] in run_page and "Headline" in run_page
    assert "helped 7" in run_page or "withheld" in run_page
    screenshot(tmp_path, page.as_uri() + "#/run", "view-run")


def test_hostile_content_renders_as_inert_text(tmp_path: Path) -> None:
    run, task = hostile_run(tmp_path)
    page = bundle(tmp_path, run)
    lines = [t for t in RunSource(run).index()["trials"].values() if t["task"] == task]
    for number in range(1, 7):  # each hostile candidate record on the right
        url = page.as_uri() + f"#/task/{quote(task)}?b=candidate&rb={number}"
        shown = dom(tmp_path, url)
        assert "<title>deltarun view</title>" in shown  # no injected script ran
        assert "javascript:" not in re.sub(r">[^<]*<", "><", shown)  # only ever text
        assert "<textarea" not in shown and "<script>" not in shown
        assert "could not load" not in shown
        right = side(shown, "b")
        assert "data-line" in right
    assert any(t["note"] for t in lines)
    shown = dom(tmp_path, page.as_uri() + f"#/task/{quote(task)}?b=candidate&rb=1")
    assert html.escape(EVIL, quote=False) in shown  # the patch line, as text
    screenshot(tmp_path, page.as_uri() + f"#/task/{quote(task)}?b=candidate&rb=2", "view-hostile")


def test_served_pages_render(tmp_path: Path) -> None:
    run = copy_run(tmp_path, "run-features")
    process, url = start_server(run)
    try:
        shown = dom(tmp_path, url)
        index = RunSource(run).index()
        assert len(re.findall(r"<tr data-task=", shown)) == len(index["rows"])
        task = index["rows"][0]["id"]
        detail = dom(tmp_path, url + f"#/task/{quote(task)}?b=cand&rb=2")
        assert 'id="rep-b"' in detail and 'value="2" selected=""' in side(detail, "b")
        screenshot(tmp_path, url + f"#/task/{quote(task)}", "view-served-task")
    finally:
        stop(process)


def test_keyboard_moves_between_trials_and_back(tmp_path: Path) -> None:
    """Driven as a person would (Playwright over Debian's chromium): j / k on the matrix,
    Enter, then j / k from task to task with the arms kept, and Escape back."""
    from playwright.sync_api import sync_playwright

    from tests.test_report_html import CHROMIUM_FLAGS, chromium

    run = copy_run(tmp_path)
    order = [r["id"] for r in RunSource(run).index()["rows"]]
    page_url = bundle(tmp_path, run).as_uri()
    flags = [f for f in CHROMIUM_FLAGS if f != "--headless"]
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=chromium(), args=flags)
        try:
            page = browser.new_page()
            page.goto(page_url)
            page.wait_for_selector("tr[data-task]")
            page.keyboard.press("j")
            page.keyboard.press("j")
            assert page.get_attribute("tr.current", "data-task") == order[1]
            page.keyboard.press("k")
            assert page.get_attribute("tr.current", "data-task") == order[0]
            page.keyboard.press("Enter")
            page.wait_for_selector("#side-b")
            assert page.inner_text("h1") == f"Task {order[0]}"
            page.select_option("#arm-b", index=0)  # a choice of arms the keys keep
            kept = page.evaluate("location.hash").split("?", 1)[1]
            page.keyboard.press("j")
            # A selector, not a JS predicate: the page's CSP forbids the eval the latter needs.
            page.wait_for_selector(f'h1:text-is("Task {order[1]}")')
            assert page.evaluate("location.hash").split("?", 1)[1] == kept
            page.keyboard.press("k")
            # A selector, not a JS predicate: the page's CSP forbids the eval the latter needs.
            page.wait_for_selector(f'h1:text-is("Task {order[0]}")')
            page.keyboard.press("Escape")
            page.wait_for_selector("tr[data-task]")
            assert page.evaluate("document.body.getAttribute('data-page')") == "matrix"
            page.fill("#q", "j")  # typed into the search field: not a key for the page
            assert page.evaluate("document.body.getAttribute('data-page')") == "matrix"
            page.screenshot(path=str(tmp_path / "view-keys.png"))
        finally:
            browser.close()
