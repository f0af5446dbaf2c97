"""runner.grading.verify_log on logs as each runner prints them (pure): sympy's verbose run
(printed by sympy 1.12's own reporter), pytest's wrapped progress letters and a canary
whose section title a declared test shares, output the letters cannot be matched in, a
session that ended early, a process that never reported; and the viewer's reading of the
line the harness ends the log with (``runner.view.text``)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from runner.grading.canaries import Canary
from runner.grading.verdict import read_channel
from runner.grading.verify_log import CANARY_LINE, stored_log
from runner.view.text import canaries, canary_note, failing_tests

SY = "sympy/calc/tests/test_x.py"
SY_CANARIES = [
    Canary(SY, "test_value_check", False),
    Canary(SY, "test_parse_order", True),
    Canary(SY, "test_zero_case", True),
]
SY_RULE = "_" * 80
SY_TAIL = (
    f"{SY_RULE}\n_________________ {SY}::test_parse_order _________________\n"
    "Traceback (most recent call last):\n"
    f'  File "/workspace/{SY}", line 16, in test_parse_order\n'
    "    assert value == 12\n           ^^^^^^^^^^^\nAssertionError\n"
    f"{SY_RULE}\n__________________ {SY}::test_zero_case __________________\n"
    "Traceback (most recent call last):\n"
    f'  File "/workspace/{SY}", line 20, in test_zero_case\n'
    '    assert len("ab") == 5\n           ^^^^^^^^^^^^^^\nAssertionError\n\n'
)
SY_FAILING = (
    f"{SY}[5] \ntest_add ok\ntest_value_check ok\ntest_sub F\ntest_parse_order F\n"
    f"test_zero_case F{' ' * 58}[FAIL]\n\n\n"
    f"{SY_RULE}\n_____________________ {SY}::test_sub _____________________\n"
    "Traceback (most recent call last):\n"
    f'  File "/workspace/{SY}", line 11, in test_sub\n'
    "    assert 1 - 1 == 1\n           ^^^^^^^^^^\nAssertionError\n"
    + SY_TAIL
    + "============= tests finished: 2 passed, 3 failed, in 0.01 seconds ==============\n"
    "DO *NOT* COMMIT!\n"
)
SY_PASSING = (
    f"{SY}[5] \ntest_add ok\ntest_value_check ok\ntest_sub ok\ntest_parse_order F\n"
    f"test_zero_case F{' ' * 58}[FAIL]\n\n\n"
    + SY_TAIL
    + "============= tests finished: 3 passed, 2 failed, in 0.01 seconds ==============\n"
    "DO *NOT* COMMIT!\n"
)


def channel(items: list[str], outcomes: dict[str, str], finished: bool = True) -> Any:
    """The records of a session whose tests report ``outcomes`` (call phase), in order."""
    records: list[dict[str, Any]] = [
        {"t": "start"},
        {"t": "collected", "items": items, "modules": {}},
    ]
    for nodeid, outcome in outcomes.items():
        records.append({"t": "report", "n": nodeid, "w": "call", "o": outcome})
    if finished:
        bad = any(o in ("failed", "error") for o in outcomes.values())
        records.append({"t": "finish", "status": int(bad)})
    return read_channel(b"".join(b"\n" + json.dumps(r).encode() + b"\n" for r in records))


def sympy_records(sub: str) -> Any:
    outcomes = {
        f"{SY}::test_add": "passed",
        f"{SY}::test_value_check": "passed",
        f"{SY}::test_sub": sub,
        f"{SY}::test_parse_order": "failed",
        f"{SY}::test_zero_case": "failed",
    }
    return channel(list(outcomes), outcomes)


def test_sympy_a_passing_run_shows_the_declared_tests_only() -> None:
    log = stored_log(SY_PASSING, "sympy", SY_CANARIES, sympy_records("passed"))
    body, last = log.rstrip("\n").rsplit("\n", 1)
    assert f"{SY}[2] \ntest_add ok\ntest_sub ok   [OK]\n" in body, body
    for name in ("test_value_check", "test_parse_order", "test_zero_case", "FAIL", "COMMIT"):
        assert name not in body, body
    assert "= tests finished: 2 passed, in 0.01 seconds =" in body, body
    assert last.startswith(f"{CANARY_LINE}3 of 3 behaved as planted"), last


def test_sympy_a_failing_run_keeps_the_declared_failure() -> None:
    log = stored_log(SY_FAILING, "sympy", SY_CANARIES, sympy_records("failed"))
    assert "test_sub F   [FAIL]\n" in log and f"{SY}::test_sub _" in log, log
    assert "assert 1 - 1 == 1" in log and "DO *NOT* COMMIT!" in log
    assert "test_parse_order" not in log and "test_zero_case" not in log, log
    assert "tests finished: 1 passed, 1 failed, in 0.01 seconds" in log, log


PY = "tests/test_a.py"
PY_CANARIES = [
    Canary(PY, "test_value_basic", False),
    Canary(PY, "test_order_case", True),
    Canary("tests/test_b.py", "test_add", True),  # a declared test of test_a has its title
]


def pytest_log(letters: list[str], summary: str) -> str:
    return (
        "\n".join(letters)
        + "\n=================================== FAILURES ===================================\n"
        "_______________________________ test_order_case ________________________________\n\n"
        "    def test_order_case():\n>       assert 1 == 2\nE       assert 1 == 2\n\n"
        f"{PY}:9: AssertionError\n"
        "___________________________________ test_add ___________________________________\n\n"
        "    def test_add():\n>       assert 2 == 3\nE       assert 2 == 3\n\n"
        "tests/test_b.py:4: AssertionError\n"
        "=========================== short test summary info ============================\n"
        f"FAILED {PY}::test_order_case - assert 1 == 2\n"
        "FAILED tests/test_b.py::test_add - assert 2 == 3\n"
        f"{summary}\n"
    )


def pytest_records(finished: bool = True) -> Any:
    outcomes = {f"{PY}::test_{i:02d}": "passed" for i in range(90)}
    outcomes = {
        f"{PY}::test_value_basic": "passed",
        **outcomes,
        f"{PY}::test_add": "passed",
        f"{PY}::test_order_case": "failed",
        "tests/test_b.py::test_add": "failed",
    }
    return channel(list(outcomes), outcomes, finished)


def test_pytest_wrapped_progress_letters_and_a_shared_title() -> None:
    """94 letters over two lines (as pytest wraps them), the canaries' taken out and the
    percentages counted over the declared tests; the section titled ``test_add`` stays,
    since the declared ``test_a.py::test_add`` has that title too (a declared failure is
    never hidden): its summary line, which names the file, goes."""
    printed = [f"{'.' * 80} [ 85%]", f"{'.' * 12}FF [100%]"]
    log = stored_log(pytest_log(printed, "2 failed, 92 passed in 0.50s"), "pytest", PY_CANARIES,
                     pytest_records())  # fmt: skip
    lines = log.split("\n")
    assert lines[0] == f"{'.' * 79}  [ 86%]", lines[0]
    assert lines[1] == f"{'.' * 12}   [100%]", lines[1]
    assert "test_order_case" not in log and "tests/test_b.py::test_add" not in log, log
    assert "    def test_add():" in log  # the shared title's section is kept
    assert "\n91 passed in 0.50s\n" in log, log
    assert lines[-2].startswith(f"{CANARY_LINE}3 of 3 behaved"), lines[-2]


def test_pytest_output_the_letters_cannot_be_matched_in_stays_as_printed() -> None:
    printed = [f"{'.' * 40}print from a test", f"{'.' * 51}FF [100%]"]
    log = stored_log(pytest_log(printed, "2 failed, 92 passed in 0.50s"), "pytest", PY_CANARIES,
                     pytest_records())  # fmt: skip
    assert log.startswith("\n".join(printed)), log  # the letters as printed
    assert "test_order_case" not in log and "\n91 passed in 0.50s\n" in log, log


def test_a_session_that_did_not_finish_keeps_its_summary_and_no_records_keep_all() -> None:
    printed = [f"{'.' * 80} [ 85%]", f"{'.' * 12}FF [100%]"]
    raw = pytest_log(printed, "2 failed, 92 passed in 0.50s")
    unfinished = stored_log(raw, "pytest", PY_CANARIES, pytest_records(finished=False))
    assert "\n2 failed, 92 passed in 0.50s\n" in unfinished  # no finish record: as printed
    assert "test_order_case" not in unfinished
    never = stored_log(raw, "pytest", PY_CANARIES, read_channel(b""))
    assert never.startswith(raw.rstrip("\n")), never
    assert never.rstrip().endswith(
        "3 planted (1 that must pass, 2 that must fail); the test process ended before "
        "reporting any"
    ), never


def test_tampering_keeps_the_canary_that_misbehaved_and_says_so() -> None:
    outcomes = {f"{PY}::test_value_basic": "passed", f"{PY}::test_add": "passed"}
    outcomes |= {f"{PY}::test_order_case": "passed", "tests/test_b.py::test_add": "failed"}
    records = channel(list(outcomes), outcomes)
    raw = "...F\nFAILED tests/test_b.py::test_add - x\n1 failed, 3 passed in 0.1s\n"
    why = f"test process tampered: a test that must fail passed ({PY}::test_order_case)"
    log = stored_log(raw, "pytest", PY_CANARIES, records, why)
    last = log.rstrip().split("\n")[-1]
    assert last.startswith(f"{CANARY_LINE}2 of 3 behaved as planted"), last
    assert f"not as planted (their lines kept): {PY}::test_order_case (must fail: passed)" in last
    assert last.endswith(f"TAMPERING: {why}"), last
    assert log.startswith("..\n"), log  # the must-pass canary's letter out, the forger's kept
    assert "\n1 passed in 0.1s\n" in log, log


def test_the_viewer_reads_the_harness_line_only_at_the_end() -> None:
    line = f"{CANARY_LINE}6 of 6 behaved as planted (2 that must pass passed, 4 that must fail did)"
    log = f"...\n3 passed in 0.1s\n\n{line}\n"
    assert canary_note(log) == line.removeprefix(CANARY_LINE)
    assert canaries(log) == [] and failing_tests(log) == []
    forged = f"{line}\nFAILED tests/test_a.py::test_add - x\n"  # printed by a test, not last
    assert canary_note(forged) == "" and failing_tests(forged) == ["tests/test_a.py::test_add"]


def test_pytest_summary_keeps_warnings_and_deselected_and_counts_errors_per_phase() -> None:
    """pytest counts per phase: a test that failed in its call and its teardown is one
    failure and one error; words that are no outcome stay as printed, in pytest's order."""
    records = [
        {"t": "start"},
        {"t": "collected", "items": [f"{PY}::test_value_basic", f"{PY}::test_x"], "modules": {}},
        {"t": "report", "n": f"{PY}::test_value_basic", "w": "call", "o": "passed"},
        {"t": "report", "n": f"{PY}::test_x", "w": "call", "o": "failed"},
        {"t": "report", "n": f"{PY}::test_x", "w": "teardown", "o": "error"},
        {"t": "finish", "status": 1},
    ]
    found = read_channel(b"".join(b"\n" + json.dumps(r).encode() + b"\n" for r in records))
    raw = ".FE\n===== 1 failed, 1 passed, 3 deselected, 2 warnings, 1 error in 0.2s =====\n"
    log = stored_log(raw, "pytest", PY_CANARIES[:1], found)
    assert log.startswith("FE\n"), log
    assert "= 1 failed, 3 deselected, 2 warnings, 1 error in 0.2s =" in log, log


PIECES = [
    *SY_FAILING.split("\n"),
    *pytest_log([f"{'.' * 80} [ 85%]", f"{'.' * 12}FF [100%]"], "2 failed, 92 passed in 1s").split(
        "\n"
    ),
    "=" * 70,
    "-" * 70,
    "FAIL: test_order_case (tests.test_a.Cls.test_order_case)",
    "test_order_case (tests.test_a.Cls.test_order_case) ... FAIL",
    "Ran 3 tests in 0.1s",
    "FAILED (failures=2)",
    "Found 9 test(s).",
    "collected 9 items / 2 deselected / 7 selected",
    f"{PY}::test_order_case FAILED  [ 50%]",
    "",
    "no tests ran in 0.1s",
]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from(PIECES), max_size=40),
    st.sampled_from(["pytest", "unittest", "django", "sympy"]),
    st.booleans(),
)
def test_any_output_gives_a_log_ending_with_the_canary_line(
    pieces: list[str], runner: str, finished: bool
) -> None:
    """Whatever the test process printed, in any order, the rewrite never fails and the
    harness's line is last."""
    planted = [*PY_CANARIES, *SY_CANARIES, Canary(PY, "test_order_case", True, "Cls")]
    log = stored_log("\n".join(pieces), runner, planted, pytest_records(finished))
    assert log.rstrip("\n").split("\n")[-1].startswith(CANARY_LINE)
