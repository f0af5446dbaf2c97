"""A canary's failure is never reported as the install step's (issue 38, item 4): only the
install step's own reason says it failed, and a failed assertion in the test log (a
must-fail canary's) is never taken for what broke the setup."""

from __future__ import annotations

import json
from pathlib import Path

from runner.setup_signals import INSTALL_FIX, setup_failure
from tests.conftest import run_cli
from tests.helpers import ADD_FIXTURE, ADD_GOLD, make_suite, repo_task, validate_gold

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


# A project built by setuptools whose one dependency no index here has (nor has the image).
PACKAGED = {
    **ADD_FIXTURE,
    "pyproject.toml": (
        '[build-system]\nrequires = ["setuptools>=40.8.0"]\n'
        'build-backend = "setuptools.build_meta"\n\n'
        '[project]\nname = "calc"\nversion = "1.0"\ndependencies = ["calc-helpers-nowhere"]\n'
        '\n[tool.setuptools]\npackages = ["calc"]\n'
    ),
}


def test_an_install_step_that_asks_an_index_is_told_the_offline_fix() -> None:
    """pip's "No matching distribution" in a failed step's reason: the requirement named,
    and the fix for a build backend (no isolation) or for dependencies (pip_packages); a
    module the step could not import is named with its fix."""
    build = (
        "install step `pip install -e .` failed (exit 1): Installing build dependencies: "
        "started | ERROR: No matching distribution found for setuptools>=40.8.0 | WARNING: "
        "Discarding file:///workspace. /tmp/pip-build-env-x/overlay"
    )
    found = setup_failure(build, "")
    assert found is not None
    assert found.startswith(
        "install step `pip install -e .` failed (exit 1): pip found no setuptools>=40.8.0 "
        "(the sandbox has no index) -> "
    ), found
    assert "--no-build-isolation" in found and INSTALL_FIX not in found
    deps = (
        "install step `pip install -e '.[dev]'` failed (exit 1): Processing /workspace | "
        'ERROR: No matching distribution found for flake8==3.7.8; extra == "dev" | foo'
    )
    found = setup_failure(deps, "")
    assert found is not None and "pip found no flake8==3.7.8 (the" in found, found
    assert "pip_packages" in found and "--no-deps" in found and "isolat" not in found
    backend = (
        'install step `pip install -e .` failed (exit 1): File "<frozen importlib>" | '
        "ModuleNotFoundError: No module named 'flit_core'"
    )
    found = setup_failure(backend, "")
    assert found is not None and "no module named flit_core -> " in found, found
    assert "pip_packages" in found
    # pip's word earlier in the step's log than the reason's last lines: found there, and
    # a setup_requires fetch (setuptools' fetch_build_egg) told apart.
    tail = "install step `pip install -e .` failed (exit 1): ERROR: Command errored out"
    log = (
        "[deltarun] install step 1: pip install -e .\n"
        "    ERROR: No matching distribution found for setuptools-scm\n"
        '      File "/usr/lib/python3/dist-packages/setuptools/installer.py", in '
        "fetch_build_egg\n"
        "[deltarun] install step 1 failed (exit 1)\n"
        "E   ModuleNotFoundError: No module named 'not_the_install'\n"
    )
    found = setup_failure(tail, log)
    assert found is not None and "pip found no setuptools-scm (the" in found, found
    assert "setup_requires" in found and "pip_packages" in found
    after = "[deltarun] install step 1 failed (exit 1)\nNo module named 'tests_only'\n"
    assert setup_failure(tail, "[deltarun] install step 1: x\n" + after) == (
        f"{tail} -> {INSTALL_FIX}"
    )
    scm = (
        "[deltarun] install step 1: pip install -e .\n"
        "LookupError: setuptools-scm was unable to detect version for /workspace.\n"
        "[deltarun] install step 1 failed (exit 1)\n"
    )
    found = setup_failure(tail, scm)
    assert found is not None and "SETUPTOOLS_SCM_PRETEND_VERSION" in found, found
    old_pip = (
        "[deltarun] install step 1: python -m pip install -e .\n"
        'ERROR: File "setup.py" not found. Directory cannot be installed in editable mode: '
        "/workspace\n"
        '(A "pyproject.toml" file was found, but editable mode currently requires a setup.py '
        "based build.)\n"
        "[deltarun] install step 1 failed (exit 1)\n"
    )
    found = setup_failure(tail, old_pip)
    assert found is not None and "give a newer pip in the spec's pip_packages" in found, found
    # A step that failed otherwise keeps the general fix.
    other = setup_failure("install step `make` failed (exit 2): No rule to make target", "")
    assert other == f"install step `make` failed (exit 2): No rule to make target -> {INSTALL_FIX}"


def test_an_install_as_the_field_writes_it_builds_offline_and_names_what_it_lacks(
    tmp_path: Path, docker_api: object
) -> None:
    """On the real engine, with the real pip of the sandbox image: ``pip install -e .`` as
    SWE-bench's specs write it builds with the image's setuptools (no isolated build, which
    would fetch it from an index), so what fails is the one dependency no index here has,
    named with the fix; the step as the fix says makes the same task valid."""
    steps = {
        "as-written": "python3 -m pip install -e .",
        "fixed": "python3 -m pip install -e . --no-deps",
    }
    tasks = [{**repo_task(name), "install": [step]} for name, step in steps.items()]
    verdicts, _, result = validate_gold(tmp_path, tasks, dict.fromkeys(steps, PACKAGED))
    written = verdicts["as-written"]
    assert written["verdict"] == "setup-broken", (written, result.stderr)
    assert "pip found no calc-helpers-nowhere (the sandbox" in written["detail"], written
    assert "--no-deps" in written["detail"], written
    assert verdicts["fixed"]["verdict"] == "valid", (verdicts["fixed"], result.stderr)
