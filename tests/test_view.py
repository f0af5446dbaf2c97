"""``deltarun view``: the run's index, trial details, bundle and server, without a browser
(tests/test_view_browser.py opens the pages in headless Chromium, tests/test_view_runs.py
runs made for real); the canaries, the agent's steps, the setup warnings' trials,
reverify.json and report.html's link to the viewer."""

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
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from runner.errors import UserError
from runner.store.rundir import RunMeta
from runner.view.assets import CSP, data_script
from runner.view.ledger_lines import detail
from runner.view.matrix import majority, versus
from runner.view.setup_links import linked, signs
from runner.view.source import RunSource
from runner.view.steps import steps
from runner.view.text import LINE_CHARS, TEXT_CHARS, canaries, clip, failing_tests, patch_view
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


# ---------------------------------------------------------------- canaries, steps, warnings

CANARY_LOG = (
    "..FF\n=== short test summary info ===\n"
    "FAILED tests/test_hidden.py::test_add - assert 6 == 5\n"
    "FAILED tests/test_hidden.py::test_tests_hidden_19 - AssertionError\n"
    "2 failed, 1 passed in 0.21s\n\n"
    "[deltarun] 2 canary tests were added to the declared test files; these must fail and "
    "their failure is expected: tests/test_hidden.py::test_tests_hidden_19\n"
)


def test_the_harness_canaries_are_not_the_failing_test() -> None:
    assert canaries(CANARY_LOG) == ["tests/test_hidden.py::test_tests_hidden_19"]
    assert failing_tests(CANARY_LOG) == ["tests/test_hidden.py::test_add"]
    shown = detail(
        1, json.dumps({**ledger(FIXTURES / "run-quickstart")[0], "verify_log": CANARY_LOG}), None
    )
    assert shown["verify"]["failing"] == ["tests/test_hidden.py::test_add"]
    assert shown["verify"]["canaries"] == ["tests/test_hidden.py::test_tests_hidden_19"]
    assert [CANARY_LOG.split("\n")[n] for n in shown["verify"]["marks"]] == [
        "FAILED tests/test_hidden.py::test_add - assert 6 == 5"
    ]
    # The tests' own output cannot hide a failure: only the log's last line names canaries.
    forged = CANARY_LOG.replace("test_tests_hidden_19\n", "test_tests_hidden_19\nmore output\n")
    forged = forged.replace("expected: tests/test_hidden.py::test_tests_hidden_19", "expected: "
                            "tests/test_hidden.py::test_add")  # fmt: skip
    assert canaries(forged) == [] and "tests/test_hidden.py::test_add" in failing_tests(forged)


def test_steps_show_each_replys_tokens_and_readable_calls() -> None:
    patch = "diff --git a/x b/x\n+new\n"
    transcript = [
        {"role": "system", "content": "You are..."},
        {"role": "assistant", "content": None, "turn": 1, "model": "m", "usage": [120, 10],
         "tool_calls": [{"id": "c1", "type": "function",
                         "function": {"name": "apply_patch", "arguments": json.dumps({"patch": patch})}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "patch applied", "name": "apply_patch"},
        {"role": "tool", "tool_call_id": "c2", "content": "no", "name": "read_file", "refused": "forbidden"},
        {"role": "assistant", "text": "done", "tool": "Bash", "arguments": '{"command": "ls"}',
         "result": "a\nb", "input_tokens": 7, "output_tokens": 3},
        {"role": "assistant", "usage": {"prompt_tokens": 5, "completion_tokens": "x"}},
        "not an object",
    ]  # fmt: skip
    shown = steps(transcript)
    assert [s["tokens"] for s in shown] == [None, [120, 10], None, None, [7, 3], [5, 0], None]
    assert shown[1]["title"] == "assistant → apply_patch"
    assert "turn 1 · model m" in shown[1]["body"] and f"patch:\n{patch}" in shown[1]["body"]
    assert shown[2]["title"] == "tool apply_patch" and "patch applied" in shown[2]["body"]
    assert shown[3]["title"] == "tool read_file (refused: forbidden)"
    assert shown[4]["title"] == "assistant → Bash" and 'command: "ls"' in shown[4]["body"]
    assert "← a\nb" in shown[4]["body"] and shown[6]["title"] == "step"
    assert steps("no list") == [] and len(steps([{}] * 5000)) == 2000


def test_each_setup_warning_links_the_trials_behind_it() -> None:
    """Every kind of warning the report writes (tests.test_setup_warnings makes each one)
    is linked to the records showing its sign; an unknown warning stays unlinked."""
    from runner.config.loader import parse_controls
    from runner.store.setup_warnings import setup_warnings
    from tests.test_setup_warnings import CONTROLS, broken_records

    records = broken_records()
    controls = parse_controls(CONTROLS, "c")
    found = setup_warnings(controls, records)
    shown = [(line, signs(controls, r)) for line, r in enumerate(records, start=1)]
    links = linked([*found, "a warning a newer deltarun writes"], shown)
    assert [w["text"] for w in links[:5]] == found
    assert [w["trials"] for w in links] == [[1], [3], [4], [5, 6], [2], []]


def test_the_run_page_links_the_report_warnings(tmp_path: Path) -> None:
    for name in ("run-features", "run-quickstart"):
        run = copy_run(tmp_path, name)
        records = ledger(run)
        warnings = RunSource(run).run_page()["setup_warnings"]
        report = json.loads((run / "report.json").read_text())
        assert [w["text"] for w in warnings] == report["setup_warnings"] and len(warnings) == 1
        lines = warnings[0]["trials"]
        if name == "run-features":  # the scripted control passes ordinary tasks
            want = [n for n, r in enumerate(records, start=1) if r["arm"] == "ctrl"
                    and r["passed"] and r["task_kind"] == "ordinary"]  # fmt: skip
        else:  # the recorded candidate has no output for one task
            want = [n for n, r in enumerate(records, start=1) if r["arm"] == "candidate"
                    and r["task_id"] == "template-filters"]  # fmt: skip
        assert lines == want and want


# ---------------------------------------------------------------- reverify.json


def keep_reverified(run: Path, flips: int) -> list[dict[str, Any]]:
    """reverify.json as ``replay --reverify`` writes it (``runner.run.reverify``), saying the
    verdict of the first ``flips`` re-checkable records changed; those records."""
    from datetime import UTC, datetime

    from runner.store.changes import Changed, changes_json, keep_changes
    from runner.store.rundir import RunDir

    rundir = RunDir(run)
    flipped = [t for t in rundir.trials() if t.outcome.value in ("success", "miss")][:flips]
    changed = [Changed(t, not t.passed) for t in flipped]
    now = datetime(2026, 12, 1, tzinfo=UTC)
    keep_changes(rundir, changes_json(now, rundir.ledger_sha256(), 40, changed))
    return [r for r in ledger(run) if r["job_id"] in {t.job_id for t in flipped}]


def test_reverify_changes_mark_their_trials_and_cells(tmp_path: Path) -> None:
    run = copy_run(tmp_path)
    source = RunSource(run)
    assert source.index()["reverify"] is None and source.run_page()["reverify"] is None
    flipped = keep_reverified(run, 3)
    index = source.index()  # the file is new: the index is read again
    assert index["reverify"] == {
        "ran_at": "2026-12-01T00:00:00+00:00", "checked": 40, "changed": 3, "note": ""
    }  # fmt: skip
    marked = {t["task"]: t["rv"] for t in index["trials"].values() if "rv" in t}
    assert marked == {
        r["task_id"]: {"was": r["outcome"], "now": "miss" if r["passed"] else "success"}
        for r in flipped
    }
    for row in index["rows"]:
        for arm, cell in row["cells"].items():
            mine = [r for r in flipped if r["task_id"] == row["id"] and r["arm"] == arm]
            assert cell["changed"] == len(mine)
    assert source.run_page()["reverify"]["changed"] == 3


def test_a_reverify_file_that_is_not_ours_is_a_note(tmp_path: Path) -> None:
    run = copy_run(tmp_path)
    (run / "reverify.json").write_text('{"changed": [1, 2], "checked": true}')
    index = RunSource(run).index()
    assert index["reverify"]["note"] and index["reverify"]["checked"] is None
    assert not any("rv" in t for t in index["trials"].values())
    (run / "reverify.json").write_bytes(b"\xff{not json")
    assert RunSource(run).index()["reverify"]["changed"] == 0


# ---------------------------------------------------------------- report.html's link


def test_runs_recorded_before_the_link_keep_their_report(tmp_path: Path) -> None:
    """run.json of a run recorded before ``view_bundle`` lacks it: its report.html has no
    link and rebuilds byte for byte; a new run's run.json names the folder."""
    from runner.report.assemble import build_report
    from runner.store.rundir import VIEW_BUNDLE, RunDir

    for name in ("run-quickstart", "run-features"):
        run = copy_run(tmp_path, name)
        assert "view_bundle" not in json.loads((run / "run.json").read_text())
        assert RunDir(run).meta().view_bundle == ""
        stored = (run / "report.html").read_text(encoding="utf-8")
        assert "index.html" not in stored
        assert build_report(RunDir(run)).html == stored
    meta = RunDir(copy_run(tmp_path / "new")).meta()
    fresh = replace(meta, view_bundle=VIEW_BUNDLE)  # as a new run writes it
    assert RunMeta(**{k: v for k, v in meta.to_json().items() if k != "view_bundle"}) == fresh


def test_the_link_is_a_plain_relative_path() -> None:
    from runner.report.html import render_html

    assert 'href="view/index.html"' in render_html({}, viewer="view")
    assert "index.html" not in render_html({})
    for hostile in ("javascript:alert(1)", "../elsewhere", "/etc", 'a"b', "a/../../b"):
        assert "index.html" not in render_html({}, viewer=hostile), hostile


def test_a_bundle_goes_outside_the_run_or_where_report_html_links(tmp_path: Path) -> None:
    run = copy_run(tmp_path)
    inside = run_cli("view", str(run), "--bundle", str(run / "view"))
    assert inside.returncode == 0, inside.stderr
    assert (run / "view" / "index.html").is_file()
    for elsewhere in (run, run / "other", run / "view" / "deeper"):
        refused = run_cli("view", str(run), "--bundle", str(elsewhere))
        assert refused.returncode == 1 and "inside the run directory" in refused.stderr
