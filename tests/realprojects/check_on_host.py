"""Check the realprojects dataset on this host, without deltarun.

For each instance of instances.jsonl: a fresh clone of its repository at base_commit, in a
venv under the temporary directory with pytest 7.2.1 and the versions of its dependencies
that Debian bookworm ships, plus the spec's pip_packages; the spec's install, if any, run
in the clone; then PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 with the plugins named (``-p
pytest_cov`` where it is installed) and PYTHONPATH=src for the src/ layouts the spec does
not install, the spec's test_cmd (``pytest`` run as ``python -m pytest``) on the declared
tests:

  (a) with test_patch: every FAIL_TO_PASS test fails, every PASS_TO_PASS test passes;
  (b) with test_patch and the gold patch: every declared test passes.

The broken instance must stop pytest on a usage error (exit 4) in (a) and (b) alike.

    python -m tests.realprojects.check_on_host [--data DIR]   (default: build one)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from tests.realprojects.build import ENV, PROJECT, build

VENVS = Path(tempfile.gettempdir()) / "deltarun-realprojects-venvs"
# Debian bookworm's python3-pytest and the packages it depends on.
PYTEST_PINS = (
    "pytest==7.2.1",
    "pluggy==1.0.0",
    "iniconfig==1.1.1",
    "packaging==23.0",
    "attrs==22.2.0",
)
ANSI = re.compile(r"\x1b\[[0-9;]*m")
OUTCOME = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS) (\S+)")
USAGE_ERROR = 4


def run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, check=False, **kwargs)


def checked(command: list[str], **kwargs: Any) -> str:
    done = run(command, **kwargs)
    if done.returncode != 0:
        raise SystemExit(
            f"check_on_host: {shlex.join(command)} failed:\n{done.stdout}{done.stderr}"
        )
    return done.stdout


def venv_for(spec: dict[str, Any], repo: str) -> Path:
    """A venv with pytest and the spec's packages; its own per repository when the spec
    installs the project into it. Kept between runs (a stamp names what it holds)."""
    pins = [*PYTEST_PINS, *spec.get("pip_packages", [])]
    wanted = "\n".join([*pins, repo if spec.get("install") else ""])
    venv = VENVS / hashlib.sha256(wanted.encode()).hexdigest()[:16]
    stamp = venv / "deltarun-pins.txt"
    if stamp.is_file() and stamp.read_text() == wanted:
        return venv
    shutil.rmtree(venv, ignore_errors=True)
    checked([sys.executable, "-m", "venv", str(venv)])
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    checked([*pip, "--disable-pip-version-check", *pins])
    stamp.write_text(wanted)
    return venv


def env_for(venv: Path, spec: dict[str, Any], source_root: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS")}
    env.pop("VIRTUAL_ENV", None)
    env.update({str(k): str(v) for k, v in (spec.get("env_vars") or {}).items()})
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if source_root != "." and not spec.get("install"):
        env["PYTHONPATH"] = source_root
    return env


def pytest(
    venv: Path, clone: Path, spec: dict[str, Any], env: dict[str, str], tests: list[str]
) -> tuple[int, dict[str, str], str]:
    """Run the spec's test_cmd on ``tests``: exit code, outcome per test id, output."""
    command = shlex.split(spec["test_cmd"])
    if command[0] == "pytest":
        command = [str(venv / "bin" / "python"), "-m", "pytest", *command[1:]]
    if any(pin.startswith("pytest-cov==") for pin in spec.get("pip_packages", [])):
        command += ["-p", "pytest_cov"]
    done = run([*command, *tests], cwd=clone, env=env)
    output = ANSI.sub("", done.stdout + done.stderr)
    outcomes: dict[str, str] = {}
    for line in output.splitlines():
        match = OUTCOME.match(line)
        if match:
            outcomes[match.group(2)] = match.group(1)
    return done.returncode, outcomes, output


def apply(clone: Path, patch: str) -> None:
    checked(["git", "-C", str(clone), "apply", "-"], input=patch, env=ENV)


def prepare(
    row: dict[str, Any], specs: dict[str, Any], repos: Path, work: Path
) -> tuple[Path, Path, dict[str, Any], dict[str, str]]:
    """A clone at base_commit with the spec's environment ready: clone, venv, spec, env."""
    spec = specs[row["repo"]][row["version"]]
    project = PROJECT[row["repo"]]
    venv = venv_for(spec, row["repo"])
    clone = work / row["instance_id"]
    checked(["git", "clone", "-q", str(repos / project.dirname), str(clone)], env=ENV)
    checked(["git", "-C", str(clone), "checkout", "-q", "--detach", row["base_commit"]], env=ENV)
    env = env_for(venv, spec, project.source_root)
    if spec.get("install"):
        checked(["bash", "-c", spec["install"]], cwd=clone, env=env)
    return clone, venv, spec, env


def check(row: dict[str, Any], specs: dict[str, Any], repos: Path, work: Path) -> list[str]:
    """The instance's problems (none: it holds), after printing what was found."""
    clone, venv, spec, env = prepare(row, specs, repos, work)
    fail_to_pass, pass_to_pass = json.loads(row["FAIL_TO_PASS"]), json.loads(row["PASS_TO_PASS"])
    tests = fail_to_pass + pass_to_pass
    problems: list[str] = []
    apply(clone, row["test_patch"])
    _, before, out_a = pytest(venv, clone, spec, env, tests)
    for test in fail_to_pass:
        if before.get(test) not in ("FAILED", "ERROR"):
            problems.append(f"(a) FAIL_TO_PASS {test}: {before.get(test, 'not run')}")
    for test in pass_to_pass:
        if before.get(test) != "PASSED":
            problems.append(f"(a) PASS_TO_PASS {test}: {before.get(test, 'not run')}")
    apply(clone, row["patch"])
    _, after, out_b = pytest(venv, clone, spec, env, tests)
    for test in tests:
        if after.get(test) != "PASSED":
            problems.append(f"(b) {test}: {after.get(test, 'not run')}")
    failed = sum(before.get(test) in ("FAILED", "ERROR") for test in fail_to_pass)
    passed = sum(before.get(test) == "PASSED" for test in pass_to_pass)
    print(
        f"{'ok  ' if not problems else 'FAIL'} {row['instance_id']:<32} "
        f"(a) F2P {failed}/{len(fail_to_pass)} failed, P2P {passed}/{len(pass_to_pass)} passed;"
        f" (b) {sum(after.get(test) == 'PASSED' for test in tests)}/{len(tests)} passed"
    )
    if problems:
        print(out_a[-3000:] + "\n" + out_b[-3000:])
    return problems


def check_broken(row: dict[str, Any], specs: dict[str, Any], repos: Path, work: Path) -> list[str]:
    """The broken instance: pytest stops on a usage error with and without the gold patch."""
    clone, venv, spec, env = prepare(row, specs, repos, work)
    tests = json.loads(row["FAIL_TO_PASS"]) + json.loads(row["PASS_TO_PASS"])
    problems: list[str] = []
    apply(clone, row["test_patch"])
    codes = [pytest(venv, clone, spec, env, tests)]
    apply(clone, row["patch"])
    codes.append(pytest(venv, clone, spec, env, tests))
    for label, (code, _, output) in zip("ab", codes, strict=True):
        if code != USAGE_ERROR:
            problems.append(f"({label}) pytest exited {code}, not {USAGE_ERROR}:\n{output[-2000:]}")
    reason = next((line for line in codes[0][2].splitlines() if "error:" in line), "")
    print(
        f"{'ok  ' if not problems else 'FAIL'} {row['instance_id']:<32} "
        f"setup-broken as meant: (a) exit {codes[0][0]}, (b) exit {codes[1][0]}: {reason.strip()}"
    )
    return problems


def rows_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data", type=Path, help="a dataset build.py wrote (default: build one)")
    args = parser.parse_args()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="deltarun-realprojects-") as temp:
        data = args.data or Path(temp) / "data"
        if args.data is None:
            build(data)
        specs = yaml.safe_load((data / "specs.yaml").read_text())
        work = Path(temp) / "work"
        work.mkdir()
        problems: list[str] = []
        for row in rows_of(data / "instances.jsonl"):
            problems += check(row, specs, data / "repos", work)
        for row in rows_of(data / "instances-broken.jsonl"):
            problems += check_broken(row, specs, data / "repos", work)
    for problem in problems:
        print(f"  problem: {problem}")
    print(
        f"{'all hold' if not problems else f'{len(problems)} problems'} "
        f"({time.monotonic() - started:.1f} s; venvs in {VENVS})"
    )
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
