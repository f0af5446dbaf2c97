"""``deltarun view``: the run's index, trial details, bundle and server, without a browser
(tests/test_view_browser.py opens the pages in headless Chromium)."""

from __future__ import annotations

import base64
import json
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from runner.errors import UserError
from runner.view.assets import CSP, data_script
from runner.view.matrix import majority, versus
from runner.view.records import detail
from runner.view.source import RunSource
from runner.view.text import LINE_CHARS, TEXT_CHARS, clip, failing_tests, patch_view
from tests.conftest import run_cli

FIXTURES = Path(__file__).parent / "fixtures"
EVIL = "<script>document.title='pwned'</script></textarea><a href=\"javascript:alert(1)\">x</a>"


def copy_run(tmp_path: Path, name: str = "run-quickstart") -> Path:
    run = tmp_path / name
    shutil.copytree(FIXTURES / name, run)
    return run


def ledger(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "trials.jsonl").read_text().splitlines()]


def hostile_run(tmp_path: Path) -> tuple[Path, str]:
    """The quickstart run plus candidate records of one task whose patch, logs and answer
    are hostile (markup, a javascript: link, invalid UTF-8, a 10 MB line, base64), one
    record with a field the schema does not know and one line that is not JSON."""
    run = copy_run(tmp_path)
    base = next(r for r in ledger(run) if r["arm"] == "candidate" and r["patch"])
    task = base["task_id"]
    variants: list[dict[str, Any]] = [
        {"patch": f"diff --git a/x b/x\n+{EVIL}\n", "verify_log": f"FAILED t.py::test_{EVIL}\n"},
        {"agent_log": EVIL + "\n" + "A" * 10_500_000 + "\n", "answer": {"html": EVIL}},
        {"patch": base64.b64encode(b"\x00\xff\xfe binary").decode(), "patch_encoding": "base64"},
        {"patch": base64.b64encode(EVIL.encode()).decode(), "patch_encoding": "base64"},
        {"transcript": [{"role": "assistant", "content": EVIL}], "future_field": EVIL},
    ]
    lines = []
    for repeat, change in enumerate(variants, start=1):
        record = {**base, **change, "repeat": repeat, "job_id": f"{repeat:064x}"}
        lines.append(json.dumps(record).encode())
    bad_utf8 = json.dumps({**base, "repeat": 9, "job_id": "9" * 64, "reason": "@@"}).encode()
    lines.append(bad_utf8.replace(b"@@", b"\xff\xfe<script>x</script>"))
    lines.append(b"{not json " + EVIL.encode())
    with (run / "trials.jsonl").open("ab") as handle:
        handle.write(b"\n".join(lines) + b"\n")
    return run, task


# ---------------------------------------------------------------- pure parts


def test_majority_and_versus() -> None:
    assert [majority(2, 3), majority(1, 3), majority(1, 2), majority(0, 0)] == [
        "pass", "fail", "tie", "none"
    ]  # fmt: skip
    assert versus("pass", "fail") == "helped" and versus("fail", "pass") == "hurt"
    assert versus("fail", "fail") == "same" and versus("tie", "pass") == "inconclusive"
    assert versus("none", "pass") == "n/a"


def test_helped_hurt_same_agree_with_the_report(tmp_path: Path) -> None:
    run = copy_run(tmp_path)
    index = RunSource(run).index()
    report = json.loads((run / "report.json").read_text())
    ordinary = [row for row in index["rows"] if row["kind"] == "ordinary"]  # the pass-rate delta
    for delta in report["deltas"]:
        counts = Counter(row["vs"][delta["candidate_arm"]] for row in ordinary)
        aggregate = delta["aggregate_delta"]
        assert counts["helped"] == aggregate["helped"] and counts["hurt"] == aggregate["hurt"]
        assert counts["same"] == aggregate["same"]


def test_repeats_fold_into_counts(tmp_path: Path) -> None:
    run = copy_run(tmp_path, "run-features")
    index = RunSource(run).index()
    records = ledger(run)
    for row in index["rows"]:
        for arm, cell in row["cells"].items():
            mine = [r for r in records if r["task_id"] == row["id"] and r["arm"] == arm]
            assert cell["counts"] == dict(Counter(r["outcome"] for r in mine))
            passes = sum(r["outcome"] in ("success", "abstain_ok") for r in mine)
            assert row["status"][arm] == majority(passes, len(mine))
    assert len(index["trials"]) == len(records)


def test_patch_view_shows_binary_and_base64_as_such() -> None:
    text = "diff --git a/x b/x\n+é\n"
    shown = patch_view(base64.b64encode(text.encode()).decode(), "base64", False)
    assert shown["kind"] == "text" and shown["text"] == text and "base64" in shown["notes"][0]
    binary = patch_view(base64.b64encode(b"\x00\xff\x10").decode(), "base64", True)
    assert binary["kind"] == "binary" and binary["text"] == ""
    assert any("3 bytes" in note for note in binary["notes"])
    assert any("patch_truncated" in note for note in binary["notes"])
    broken = patch_view("not base64 !", "base64", False)
    assert broken["kind"] == "text" and "not base64" in broken["notes"][0]
    assert patch_view("", "utf-8", False)["kind"] == "empty"


def test_failing_tests_are_picked_out() -> None:
    log = (
        "..F\n___ test_b ___\nE assert 1\n=== short test summary info ===\n"
        "FAILED tests/t.py::test_b - assert 1\nERROR tests/t.py::test_c\n"
    )
    assert failing_tests(log) == ["tests/t.py::test_b", "tests/t.py::test_c"]
    assert failing_tests("..F\n____ test_only_header ____\n") == ["test_only_header"]
    assert failing_tests("3 passed\n") == []


def test_clip_bounds_a_huge_line_and_hides_control_characters() -> None:
    shown, cut = clip("a\x1b[31m\n" + "x" * 10_000_000)
    assert cut and len(shown) < TEXT_CHARS + LINE_CHARS
    assert "\x1b" not in shown and "\ufffd" in shown and "line cut" in shown
    assert clip("short\n") == ("short\n", False)


def test_unknown_and_broken_records_are_shown_with_a_note() -> None:
    base = ledger(FIXTURES / "run-quickstart")[0]
    unknown = detail(1, json.dumps({**base, "future_field": 1}), None)
    assert "future_field" in unknown["note"] and unknown["task"] == base["task_id"]
    assert ["future_field", "1"] in unknown["facts"]
    bad = detail(2, json.dumps({**base, "outcome": "exploded"}), None)
    assert "exploded" in bad["note"]
    wrong = detail(3, json.dumps({**base, "wall_s": "slow"}), None)
    assert "not a valid trial record (wall_s" in wrong["note"]
    garbage = detail(4, "{nope", None)
    assert "not JSON" in garbage["note"] and garbage["raw"]["text"] == "{nope"


def test_data_scripts_are_ascii_json_calls() -> None:
    value = {"text": EVIL + "\u2028é\ud800"[:-1], "n": float("nan")}
    script = data_script("trial", 7, value)
    assert script.isascii() and "<" in script  # markup stays a JS string, never parsed as HTML
    body = re.fullmatch(r'dvData\("trial",7,(.*)\);\n', script, re.S)
    assert body is not None
    assert json.loads(body.group(1))["text"] == value["text"]


# ---------------------------------------------------------------- a run on disk


def test_hostile_records_stay_bounded_text(tmp_path: Path) -> None:
    run, task = hostile_run(tmp_path)
    source = RunSource(run)
    index = source.index()
    mine = [t for t in index["trials"].values() if t["task"] == task and t["arm"] == "candidate"]
    assert len(mine) == 7  # the original record, six hostile ones
    notes = {t["i"]: t["note"] for t in index["trials"].values() if t["note"]}
    assert len(notes) == 2 and index["notes"] == 2  # the unknown field and the non-JSON line
    for entry in index["trials"].values():
        shown = source.trial(entry["i"])
        assert shown is not None
        assert len(json.dumps(shown)) < 1_000_000  # the 10 MB line is cut
    last = max(int(key) for key in index["trials"])
    assert "not JSON" in (source.trial(last) or {})["note"]
    assert source.trial(10_000) is None


def test_a_run_still_being_written_is_in_progress(tmp_path: Path) -> None:
    run = copy_run(tmp_path)
    for name in ("report.json", "report.md", "report.html"):
        (run / name).unlink()
    data = (run / "trials.jsonl").read_bytes().splitlines(keepends=True)
    (run / "trials.jsonl").write_bytes(b"".join(data[:10]) + data[10][:50])
    source = RunSource(run)
    page = source.run_page()
    assert page["in_progress"] and page["recorded"] == 11 and page["expected"] == len(data)
    assert page["headline"] == [] and page["checklist"] == []
    torn = source.index()["trials"]["11"]
    assert "still writing" in torn["note"]
    with (run / "trials.jsonl").open("ab") as handle:  # the run goes on: the index follows
        handle.write(data[10][50:] + data[11])
    assert len(source.index()["trials"]) == 12 and not source.torn


def test_a_folder_that_is_not_a_run(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not a run directory"):
        RunSource(tmp_path)
    done = run_cli("view", str(tmp_path))
    assert done.returncode == 1
    assert done.stderr.strip().count("\n") == 0 and "not a run directory" in done.stderr


def test_bundle_writes_every_trial_and_refuses_a_foreign_folder(tmp_path: Path) -> None:
    run = copy_run(tmp_path)
    out = tmp_path / "bundle"
    done = run_cli("view", str(run), "--bundle", str(out))
    assert done.returncode == 0, done.stderr
    records = ledger(run)
    assert f"({len(records)} trials)" in done.stdout
    assert len(list((out / "data" / "trial").glob("*.js"))) == len(records)
    page = (out / "index.html").read_text()
    assert CSP in page and "<script>" not in page and "style=" not in page
    assert re.findall(r"<script[^>]*>", page) == [
        '<script src="view.js">', '<script src="data/index.js">'
    ]  # fmt: skip
    again = run_cli("view", str(run), "--bundle", str(out))  # an earlier bundle: rewritten
    assert again.returncode == 0, again.stderr
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    refused = run_cli("view", str(run), "--bundle", str(foreign))
    assert refused.returncode == 1 and "not a viewer bundle" in refused.stderr


# ---------------------------------------------------------------- the server


def start_server(run: Path, *args: str) -> tuple[subprocess.Popen[str], str]:
    exe = Path(sys.executable).parent / "deltarun"
    process = subprocess.Popen(
        [str(exe), "view", str(run), "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    match = re.search(r"(http://\S+)", line)
    if match is None:
        process.kill()
        raise AssertionError(f"no URL printed: {line!r} {process.communicate()[1]!r}")
    return process, match.group(1)


def stop(process: subprocess.Popen[str]) -> None:
    process.terminate()
    process.communicate(timeout=10)


def fetch(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], str]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, dict(reply.headers), reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read().decode()


def test_server_serves_pages_and_trials_on_demand(tmp_path: Path) -> None:
    run = copy_run(tmp_path)
    process, url = start_server(run)
    try:
        assert url.startswith("http://127.0.0.1:") and "token" not in url
        status, headers, page = fetch(url)
        assert status == 200 and "frame-ancestors 'none'" in headers["Content-Security-Policy"]
        assert headers["X-Content-Type-Options"] == "nosniff" and '<script src="view.js">' in page
        status, _, index = fetch(url + "data/index.js")
        assert status == 200 and index.startswith('dvData("index",0,')
        records = ledger(run)
        status, _, trial = fetch(url + "data/trial/3.js")
        assert status == 200 and json.dumps(records[2]["task_id"]) in trial
        assert fetch(url + "data/trial/999.js")[0] == 404
        assert fetch(url + "../run.json")[0] == 404
        assert fetch(url, {"Host": "evil.example:80"})[0] == 403  # DNS rebinding
    finally:
        stop(process)


def test_another_address_needs_the_token(tmp_path: Path) -> None:
    run = copy_run(tmp_path)
    process, url = start_server(run, "--host", "127.0.0.2")
    try:
        token = re.search(r"\?token=(\S+)", url)
        assert token is not None and url.startswith("http://127.0.0.2:")
        bare = url.split("?")[0]
        assert fetch(bare)[0] == 403 and fetch(bare + "data/index.js")[0] == 403
        assert fetch(bare + "?token=wrong")[0] == 403
        status, headers, _ = fetch(url)
        assert status == 200 and "HttpOnly" in headers["Set-Cookie"]
        cookie = headers["Set-Cookie"].split(";")[0]
        assert fetch(bare + "data/index.js", {"Cookie": cookie})[0] == 200
    finally:
        stop(process)


def test_a_port_in_use_is_one_line_and_exit_1(tmp_path: Path) -> None:
    run = copy_run(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        started = time.monotonic()
        done = run_cli("view", str(run), "--port", str(port), timeout=60)
    assert done.returncode == 1 and time.monotonic() - started < 60
    assert done.stderr.strip().count("\n") == 0 and f"port {port}" in done.stderr
    assert "in use" in done.stderr
