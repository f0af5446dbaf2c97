#!/usr/bin/env python3
"""Self-check of the quickstart suite, without Docker.

``suite/`` and ``patches/`` are built from ``src/`` (``make examples``) and
not committed, so this check builds them itself, into temporary directories,
and checks that:

* the builder is deterministic (two fresh builds are byte-identical) and,
  where ``suite/`` and ``patches/`` have been built next to this script, they
  are up to date (a missing build is fine, a stale one is not);
* the digest of the built ``tasks.jsonl`` equals the ``suite.sha256`` pinned in
  ``controls.yaml`` and in every ``examples/openai/*.yaml`` (their ``suite/`` is a
  build of the same ``src/``): the pin is the check that the sources have not drifted;
* every archive matches the digest in its task line and unpacks safely;
* on every ordinary repository task the visible tests pass on the fixture,
  the hidden test command FAILS on the fixture and PASSES after the gold
  patch (with the hidden files copied over the patched tree, as the verify
  sandbox does);
* every recorded candidate patch applies cleanly, and each candidate and
  gold output gets the outcome the arms are meant to demonstrate;
* gold and candidate answers are checked against ``expect`` and ``schema``.

Hidden-test commands are run with the interpreter given by ``--python``
(default: the project venv), substituted for their leading ``python3``.
Exit status 0 when everything holds, 1 otherwise.

Usage: ``python3 examples/quickstart/check_suite.py [--python PATH]``
"""

from __future__ import annotations

import argparse
import filecmp
import hashlib
import importlib.util
import json
import os
import posixpath
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# The build under check: main() points these at a fresh temporary build.
SUITE = HERE / "suite"
PATCHES = HERE / "patches"
# Controls files that may pin this suite's digest.
CONTROLS_FILES = (HERE / "controls.yaml", *sorted((HERE.parent / "openai").glob("*.yaml")))
DEFAULT_PYTHON = HERE.parents[1] / ".venv" / "bin" / "python"

MAX_MEMBERS = 1000
MAX_BYTES = 5 * 1024 * 1024
COMMAND_TIMEOUT_S = 300

# The outcome each recorded candidate output should get under the runner's rules.
EXPECTED_CANDIDATE = {
    "slugify-accents": "success",
    "lru-get-recency": "success",
    "roman-strict-parse": "success",
    "daterange-inclusive-end": "success",
    "wrap-long-words": "success",
    "glob-doublestar": "success",
    "semver-prerelease-order": "miss",
    "money-half-up": "miss",
    "template-filters": "miss",  # no patch at all: the unchanged fixture fails
    "retry-backoff-cap": "false_abstain",
    "neg-csv-mapping-missing": "invalid_completion",
    "neg-ini-attached-spec": "invalid_completion",
    "neg-units-vendor-table": "abstain_ok",
    "answer-semver-sort": "miss",
    "answer-log-error-count": "success",
    "answer-neg-invoice-total": "abstain_ok",
}


class CheckFailed(Exception):
    """One check did not hold; the message says which and why."""


# --------------------------------------------------------------------------- archives


def safe_extract(archive: Path, dest: Path) -> None:
    """Unpack *archive* into *dest* member by member, refusing anything unsafe.

    Only regular files and directories with relative, normalised paths are
    accepted, within count and size caps; ``extractall`` is never used.
    """
    total = 0
    with tarfile.open(archive) as tar:
        for count, member in enumerate(tar, start=1):
            if count > MAX_MEMBERS:
                raise CheckFailed(f"{archive.name}: more than {MAX_MEMBERS} members")
            name = member.name
            norm = posixpath.normpath(name)
            if (
                not name
                or name.startswith("/")
                or "\\" in name
                or norm != name.rstrip("/")
                or norm == "."
                or ".." in norm.split("/")
            ):
                raise CheckFailed(f"{archive.name}: unsafe member path {name!r}")
            target = dest.joinpath(*norm.split("/"))
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
            elif member.isfile():
                total += member.size
                if total > MAX_BYTES:
                    raise CheckFailed(f"{archive.name}: more than {MAX_BYTES} bytes")
                source = tar.extractfile(member)
                assert source is not None
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(source.read())
            else:
                raise CheckFailed(f"{archive.name}: {name!r} is not a regular file or directory")


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --------------------------------------------------------------------------- commands


def _env(workdir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    # Never let git discover a repository above the scratch directory.
    env["GIT_CEILING_DIRECTORIES"] = str(workdir.parent)
    return env


def run(argv: list[str], cwd: Path) -> tuple[int, str]:
    proc = subprocess.run(
        argv, cwd=cwd, env=_env(cwd), capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S
    )
    return proc.returncode, proc.stdout + proc.stderr


def run_tests(command: str, cwd: Path, python: str) -> tuple[int, str]:
    """Run a task's ``python3 -m pytest ...`` command with *python* instead of python3."""
    argv = shlex.split(command)
    if argv[0] == "python3":
        argv[0] = python
    return run(argv, cwd)


def git_apply(diff: Path, cwd: Path, check_only: bool = False) -> tuple[int, str]:
    argv = ["git", "apply"] + (["--check"] if check_only else []) + [str(diff)]
    return run(argv, cwd)


def last_line(output: str) -> str:
    lines = [line for line in output.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


# --------------------------------------------------------------------------- JSON Schema


def schema_errors(value: Any, schema: dict[str, Any], where: str = "$") -> list[str]:
    """Validate *value* against the small JSON Schema subset the suite uses.

    Supported: type, enum, required, properties, additionalProperties
    (bool or schema), items, minItems, maxItems, minimum, pattern.
    """
    types = {
        "object": dict,
        "array": list,
        "string": str,
        "boolean": bool,
        "null": type(None),
    }
    errors: list[str] = []
    kind = schema.get("type")
    if kind == "integer":
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind == "number":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif kind is not None:
        ok = isinstance(value, types[kind])
    else:
        ok = True
    if not ok:
        return [f"{where}: expected {kind}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: not one of {schema['enum']}")
    if isinstance(value, dict):
        for key in schema.get("required", []):
            if key not in value:
                errors.append(f"{where}: missing {key!r}")
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            if key in properties:
                errors += schema_errors(item, properties[key], f"{where}.{key}")
            elif extra is False:
                errors.append(f"{where}: unexpected key {key!r}")
            elif isinstance(extra, dict):
                errors += schema_errors(item, extra, f"{where}.{key}")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            errors.append(f"{where}: fewer than {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append(f"{where}: more than {schema['maxItems']} items")
        if "items" in schema:
            for index, item in enumerate(value):
                errors += schema_errors(item, schema["items"], f"{where}[{index}]")
    if isinstance(value, (int, float)) and "minimum" in schema and value < schema["minimum"]:
        errors.append(f"{where}: below {schema['minimum']}")
    if isinstance(value, str) and "pattern" in schema and not re.search(schema["pattern"], value):
        errors.append(f"{where}: does not match {schema['pattern']!r}")
    return errors


# --------------------------------------------------------------------------- checks


def load_builder() -> Any:
    """Import build_suite.py next to this script (without writing __pycache__ there)."""
    spec = importlib.util.spec_from_file_location("build_suite", HERE / "build_suite.py")
    assert spec is not None and spec.loader is not None
    builder = importlib.util.module_from_spec(spec)
    sys.dont_write_bytecode = True  # leave no __pycache__ next to the sources
    spec.loader.exec_module(builder)
    return builder


def check_builder(builder: Any, out: Path) -> str:
    """Build into *out* and once more elsewhere: the two must be byte-identical.

    ``suite/`` and ``patches/`` next to this script, where built, must equal them too.
    """
    builder.build(out)
    with tempfile.TemporaryDirectory() as second:
        builder.build(Path(second))
        for rel in ("suite", "patches"):
            mismatch = _tree_diff(out / rel, Path(second) / rel)
            if mismatch:
                raise CheckFailed(f"builder is not deterministic: {mismatch}")
    built_here = [rel for rel in ("suite", "patches") if (HERE / rel).exists()]
    for rel in built_here:
        mismatch = _tree_diff(out / rel, HERE / rel)
        if mismatch:
            raise CheckFailed(f"{rel}/ is stale, run `make examples`: {mismatch}")
    if built_here:
        return "deterministic, suite/ and patches/ here up to date"
    return "deterministic (suite/ and patches/ not built here; `make examples` builds them)"


def suite_pin(controls: Path) -> tuple[str, str] | None:
    """``(suite.file, suite.sha256)`` of a controls file, read without a YAML parser."""
    text = controls.read_text(encoding="utf-8")
    block = re.search(r"^suite:(.*?)(?=^\S|\Z)", text, re.MULTILINE | re.DOTALL)
    if block is None:
        return None
    file = re.search(r"""\bfile:\s*['"]?([^\s,'"}]+)""", block.group(1))
    sha = re.search(r"""\bsha256:\s*['"]?([0-9a-fA-F]*)""", block.group(1))
    if file is None:
        return None
    return file.group(1), sha.group(1) if sha else ""


def check_pins(tasks_file: Path) -> str:
    """Every controls file over a build of these sources (``suite/tasks.jsonl`` beside it)
    pins the digest of the fresh build."""
    digest = sha256_file(tasks_file)
    pinned = []
    for controls in CONTROLS_FILES:
        pin = suite_pin(controls)
        if pin is None or pin[0] != "suite/tasks.jsonl":  # openai's: a build of the same src
            if controls.parent == HERE:
                raise CheckFailed(f"{controls.name}: suite.file is not suite/tasks.jsonl")
            continue
        name = controls.relative_to(HERE.parent).as_posix()
        if pin[1] != digest:
            raise CheckFailed(
                f"{name} pins suite sha256 {pin[1] or '(none)'}, the sources build {digest}; "
                "restore src/, or update suite.sha256 in controls.yaml and examples/openai/*.yaml"
            )
        pinned.append(name)
    return f"tasks.jsonl sha256 {digest} pinned in {', '.join(pinned)}"


def _tree_diff(left: Path, right: Path) -> str | None:
    files_left = sorted(p.relative_to(left).as_posix() for p in left.rglob("*") if p.is_file())
    files_right = sorted(p.relative_to(right).as_posix() for p in right.rglob("*") if p.is_file())
    if files_left != files_right:
        return f"file lists differ: {sorted(set(files_left) ^ set(files_right))}"
    for rel in files_left:
        if not filecmp.cmp(left / rel, right / rel, shallow=False):
            return f"{rel} differs"
    return None


def candidate_output(task_id: str) -> tuple[str, Path | None]:
    for suffix, label in ((".diff", "patch"), (".abstain", "abstain"), (".answer.json", "answer")):
        path = PATCHES / "candidate" / f"{task_id}{suffix}"
        if path.is_file():
            return label, path
    return "nothing", None


def hidden_command(task: dict[str, Any]) -> str:
    """The declared tests as one local pytest command (deltarun runs its own, in a sandbox)."""
    files = dict.fromkeys(entry.split("::", 1)[0] for entry in task["hidden_tests"])
    return "python3 -m pytest -q -p no:cacheprovider " + " ".join(files)


def fresh_tree(task: dict[str, Any], scratch: Path, name: str) -> Path:
    tree = scratch / name
    tree.mkdir()
    safe_extract(SUITE / task["repo"], tree)
    return tree


def verify_patch(
    task: dict[str, Any], diff: Path | None, scratch: Path, name: str, python: str
) -> tuple[bool, str]:
    """Apply *diff* (if any) to a fresh fixture, copy the hidden files over, run the hidden tests."""
    tree = fresh_tree(task, scratch, name)
    if diff is not None:
        code, output = git_apply(diff, tree)
        if code != 0:
            raise CheckFailed(f"{diff.name} does not apply: {last_line(output)}")
    safe_extract(SUITE / task["hidden"], tree)
    code, output = run_tests(hidden_command(task), tree, python)
    return code == 0, last_line(output)


def check_ordinary_repo(task: dict[str, Any], scratch: Path, python: str) -> dict[str, str]:
    task_id = task["id"]
    row: dict[str, str] = {}

    fixture = fresh_tree(task, scratch, "fixture")
    code, output = run_tests("python3 -m pytest -q -p no:cacheprovider tests", fixture, python)
    if code != 0:
        raise CheckFailed(f"visible tests fail on the fixture: {last_line(output)}")
    row["visible"] = "pass"

    safe_extract(SUITE / task["hidden"], fixture)
    code, output = run_tests(hidden_command(task), fixture, python)
    if code != 1:  # 1 = tests ran and some failed; anything else is a broken test file
        raise CheckFailed(
            f"hidden test should fail on the fixture (exit 1), got exit {code}: {last_line(output)}"
        )
    row["hidden@fixture"] = "fail"

    gold = PATCHES / "gold" / f"{task_id}.diff"
    passed, summary = verify_patch(task, gold, scratch, "gold", python)
    if not passed:
        raise CheckFailed(f"hidden test should pass after gold.diff: {summary}")
    gold_tree = scratch / "gold"
    code, output = run_tests("python3 -m pytest -q -p no:cacheprovider tests", gold_tree, python)
    if code != 0:
        raise CheckFailed(f"visible + hidden tests fail after gold.diff: {last_line(output)}")
    row["hidden@gold"] = "pass"

    label, path = candidate_output(task_id)
    if label == "patch" and path is not None:
        code, output = git_apply(path, fresh_tree(task, scratch, "check"), check_only=True)
        if code != 0:
            raise CheckFailed(f"candidate diff does not apply: {last_line(output)}")
        passed, _ = verify_patch(task, path, scratch, "candidate", python)
        row["candidate"] = "patch applies, hidden " + ("pass" if passed else "fail")
        row["outcome"] = "success" if passed else "miss"
    elif label == "abstain":
        row["candidate"] = "abstains"
        row["outcome"] = "false_abstain"
    else:
        passed, _ = verify_patch(task, None, scratch, "candidate", python)
        row["candidate"] = "no output, hidden " + ("pass" if passed else "fail")
        row["outcome"] = "success" if passed else "miss"
    return row


def check_negative_repo(task: dict[str, Any], scratch: Path, python: str) -> dict[str, str]:
    task_id = task["id"]
    if any(key in task for key in ("hidden", "hidden_sha256", "hidden_tests")):
        raise CheckFailed("negative tasks must not carry hidden tests")
    if not (PATCHES / "gold" / f"{task_id}.abstain").is_file():
        raise CheckFailed("gold arm does not abstain")
    fixture = fresh_tree(task, scratch, "fixture")
    code, output = run_tests("python3 -m pytest -q -p no:cacheprovider tests", fixture, python)
    if code != 0:
        raise CheckFailed(f"visible tests fail on the fixture: {last_line(output)}")
    row = {"visible": "pass", "hidden@fixture": "-", "hidden@gold": "gold abstains"}
    label, path = candidate_output(task_id)
    if label == "patch" and path is not None:
        code, output = git_apply(path, fresh_tree(task, scratch, "check"), check_only=True)
        if code != 0:
            raise CheckFailed(f"candidate diff does not apply: {last_line(output)}")
        row["candidate"] = "fabricated patch applies"
        row["outcome"] = "invalid_completion"
    elif label == "abstain":
        row["candidate"] = "abstains"
        row["outcome"] = "abstain_ok"
    else:
        row["candidate"] = "no output"
        row["outcome"] = "invalid_completion"
    return row


def check_answer(task: dict[str, Any]) -> dict[str, str]:
    task_id = task["id"]
    schema = task["schema"]
    row = {"visible": "-", "hidden@fixture": "-"}
    if task["kind"] == "ordinary":
        errors = schema_errors(task["expect"], schema)
        if errors:
            raise CheckFailed(f"expect does not satisfy its own schema: {errors}")
        gold = json.loads((PATCHES / "gold" / f"{task_id}.answer.json").read_text(encoding="utf-8"))
        if gold != task["expect"]:
            raise CheckFailed("gold answer differs from expect")
        row["hidden@gold"] = "gold answer = expect"
    else:
        if not (PATCHES / "gold" / f"{task_id}.abstain").is_file():
            raise CheckFailed("gold arm does not abstain")
        row["hidden@gold"] = "gold abstains"

    label, path = candidate_output(task_id)
    if label == "answer" and path is not None:
        answer = json.loads(path.read_text(encoding="utf-8"))
        schema_ok = not schema_errors(answer, schema)
        exact = task["kind"] == "ordinary" and answer == task["expect"]
        row["candidate"] = (
            f"answer, schema {'ok' if schema_ok else 'bad'}, exact {'yes' if exact else 'no'}"
        )
        if task["kind"] == "negative":
            row["outcome"] = "invalid_completion"
        else:
            row["outcome"] = "success" if exact and schema_ok else "miss"
    elif label == "abstain":
        row["candidate"] = "abstains"
        row["outcome"] = "abstain_ok" if task["kind"] == "negative" else "false_abstain"
    else:
        row["candidate"] = "no output"
        row["outcome"] = "invalid_completion" if task["kind"] == "negative" else "miss"
    return row


def check_task(task: dict[str, Any], python: str) -> dict[str, str]:
    if "repo" in task:
        if sha256_file(SUITE / task["repo"]) != task["repo_sha256"]:
            raise CheckFailed(f"{task['repo']} does not match repo_sha256")
        if "hidden" in task and sha256_file(SUITE / task["hidden"]) != task["hidden_sha256"]:
            raise CheckFailed(f"{task['hidden']} does not match hidden_sha256")
        with tempfile.TemporaryDirectory(prefix=f"qs-{task['id']}-") as scratch:
            if task["kind"] == "ordinary":
                return check_ordinary_repo(task, Path(scratch), python)
            return check_negative_repo(task, Path(scratch), python)
    return check_answer(task)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--python",
        default=str(DEFAULT_PYTHON),
        help="interpreter with pytest (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    if shutil.which("git") is None:
        print("check_suite: git is required for git apply", file=sys.stderr)
        return 1

    with tempfile.TemporaryDirectory(prefix="qs-build-") as out:
        return check_all(Path(out), args.python)


def check_all(out: Path, python: str) -> int:
    """Build the suite into *out* and run every check on that build."""
    global SUITE, PATCHES
    builder = load_builder()
    failures = 0
    try:
        print(f"builder: {check_builder(builder, out)}")
    except builder.BuildError as exc:
        print(f"builder: FAILED: {exc}")
        return 1
    except CheckFailed as exc:
        print(f"builder: FAILED: {exc}")
        failures += 1
    SUITE, PATCHES = out / "suite", out / "patches"
    try:
        print(f"pins: {check_pins(SUITE / 'tasks.jsonl')}")
    except CheckFailed as exc:
        print(f"pins: FAILED: {exc}")
        failures += 1

    tasks = [
        json.loads(line)
        for line in (SUITE / "tasks.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    columns = (
        "task",
        "kind",
        "visible",
        "hidden@fixture",
        "hidden@gold",
        "candidate",
        "outcome",
        "check",
    )
    rows = []
    for task in tasks:
        kind = ("repo/" if "repo" in task else "answer/") + task["kind"]
        try:
            row = check_task(task, python)
            expected = EXPECTED_CANDIDATE.get(task["id"])
            if row["outcome"] != expected:
                raise CheckFailed(f"candidate outcome {row['outcome']}, expected {expected}")
            row["check"] = "ok"
        except CheckFailed as exc:
            row = {"check": f"FAILED: {exc}"}
            failures += 1
        rows.append({"task": task["id"], "kind": kind, **row})

    missing = sorted(set(EXPECTED_CANDIDATE) - {t["id"] for t in tasks})
    if missing:
        print(f"tasks expected but not in the suite: {missing}")
        failures += 1

    widths = [max(len(c), *(len(r.get(c, "")) for r in rows)) for c in columns]
    print()
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print(
            "  ".join(r.get(c, "").ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()
        )
    print()
    counts: dict[str, int] = {}
    for r in rows:
        if "outcome" in r:
            counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
    print("candidate outcomes: " + ", ".join(f"{k}={v}" for k, v in sorted(counts.items())))
    print("ALL CHECKS PASSED" if not failures else f"{failures} CHECK(S) FAILED")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
