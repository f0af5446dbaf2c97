"""A canary's failure is never reported as the install step's (issue 38, item 4): only the
install step's own reason says it failed, and a failed assertion in the test log (a
must-fail canary's) is never taken for what broke the setup."""

from __future__ import annotations

import json
from pathlib import Path

from runner.setup_signals import INSTALL_FIX, setup_failure
from tests.conftest import run_cli
from tests.helpers import ADD_GOLD, make_suite, repo_task

# An install step that succeeded, then the harness's pytest: the must-fail canary fails
# with an AssertionError, and one declared test id matched nothing.
INSTALLED_THEN_TESTS = """\
[deltarun] install step 1: 'python3 -m pip install -e .'
Successfully installed jinja2-3.1.2
============================= test session starts ==============================
tests/test_api.py .F.
=================================== FAILURES ===================================
_________________________ test_api_render_order_check __________________________
E       AssertionError: assert 3 == 4
tests/test_api.py:41: AssertionError
"""


def test_an_install_that_succeeded_is_not_blamed_for_a_canary_assertion() -> None:
    reason = "declared test tests/test_api.py::test_x[a b] did not run"
    assert setup_failure(reason, INSTALLED_THEN_TESTS) is None


def test_a_failed_install_is_told_from_its_own_reason_not_the_test_log() -> None:
    reason = (
        "install step `python3 -m pip install -e .` failed (exit 1): Processing /workspace | "
        "ValueError: ZIP does not support timestamps before 1980"
    )
    log = INSTALLED_THEN_TESTS  # whatever the log holds, the reason says which step failed
    found = setup_failure(reason, log)
    assert found == (
        "install step `python3 -m pip install -e .` failed (exit 1): ValueError: ZIP does "
        f"not support timestamps before 1980 -> {INSTALL_FIX}"
    )
    timed_out = setup_failure("install step `make` failed (timed out): ", "")
    assert timed_out == f"install step `make` failed (timed out) -> {INSTALL_FIX}"


def test_a_module_error_after_a_canary_assertion_is_the_one_named() -> None:
    log = (
        "[deltarun] install step 1: 'true'\n"
        "E       AssertionError: assert 3 == 4\n"
        "ImportError while importing test module '/workspace/tests/test_b.py'.\n"
        "E   ModuleNotFoundError: No module named 'markupsafe'\n"
    )
    found = setup_failure("collection failed for tests/test_b.py", log)
    assert found is not None
    assert found.startswith("ModuleNotFoundError: No module named 'markupsafe' -> ")
    assert "install step failed" not in found


def test_validate_with_a_passing_install_never_says_the_install_step_failed(
    tmp_path: Path, docker_api: object
) -> None:
    """On the real engine: an install step that succeeds, the declared test passing with
    its canaries planted (a must-fail one among them), and a declared id that matches
    nothing. The detail names the missing test, not the install step."""
    task = {
        **repo_task("t"),
        "install": ["true"],
        "hidden_tests": ["tests/test_hidden.py::test_add", "tests/test_hidden.py::test_gone"],
    }
    (tmp_path / "gold").mkdir()
    (tmp_path / "gold" / "t.diff").write_text(ADD_GOLD)
    arms = [
        {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
        {"name": "gold", "agent": {"type": "patch", "dir": "gold"}},
    ]
    controls = make_suite(tmp_path, [task], arms)
    result = run_cli("validate", str(controls), "-j", "1")
    document = json.loads((tmp_path / "suite" / "validation.json").read_text())
    (found,) = document["tasks"]
    records = [
        json.loads(line)
        for line in (Path(document["run_dir"]) / "trials.jsonl").read_text().splitlines()
    ]
    gold = next(r for r in records if r["arm"] == "gold")
    # The scene of the report: the install ran, the must-fail canaries failed (their lines
    # are left out of the stored log, which says so on its last line).
    assert "[deltarun] install step 1:" in gold["verify_log"], gold["verify_log"]
    assert "that must fail did" in gold["verify_log"].splitlines()[-1], gold["verify_log"]
    assert "test_gone" in gold["reason"] and "did not run" in gold["reason"]
    assert "install step" not in found["detail"], found
    assert "install step failed" not in result.stderr + result.stdout
    assert found["verdict"] != "setup-broken", found
