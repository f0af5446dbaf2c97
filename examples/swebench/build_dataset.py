#!/usr/bin/env python3
"""Build a small SWE-bench-format dataset from the textkit project in src/textkit.

Written (git-ignored), under ``data/`` unless ``--out`` says otherwise::

    repos/acme__textkit/         a git repository: the project, then one commit per
                                 instance that injects a bug and drops the test that
                                 catches it (that commit is the instance's base_commit)
    instances.jsonl              4 instances in SWE-bench's fields: patch (the fix),
                                 test_patch (the dropped test back), FAIL_TO_PASS,
                                 PASS_TO_PASS as JSON-encoded lists
    preds-model-a.jsonl          predictions resolving textkit-1 and textkit-2 (textkit-3
                                 missing from the file, textkit-4 an empty patch)
    preds-model-b.jsonl          resolving textkit-1..3; its textkit-4 patch fixes the bug
                                 but breaks a PASS_TO_PASS test, so it is not resolved

Commits carry fixed names and dates: the same sources give the same commit ids.
Then (``make swebench`` does all three)::

    deltarun import swebench data/instances.jsonl --repos data/repos --out suite \\
        --predictions model-a=data/preds-model-a.jsonl \\
        --predictions model-b=data/preds-model-b.jsonl --negatives 1
    deltarun run suite/controls.yaml --out runs/swebench
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "src" / "textkit"
REPO = "acme/textkit"
ENV = {
    **os.environ,
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "textkit",
    "GIT_AUTHOR_EMAIL": "dev@textkit.invalid",
    "GIT_AUTHOR_DATE": "2024-01-01T00:00:00+0000",
    "GIT_COMMITTER_NAME": "textkit",
    "GIT_COMMITTER_EMAIL": "dev@textkit.invalid",
    "GIT_COMMITTER_DATE": "2024-01-01T00:00:00+0000",
}


@dataclass(frozen=True)
class Bug:
    """One instance: a bug injected into a source file, and the test that catches it."""

    number: int
    problem: str
    source: str
    fixed: str  # text of the fixed source
    broken: str  # what it becomes at base_commit
    test_file: str
    test_block: str  # dropped from test_file at base_commit; test_patch adds it back
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]


BUGS = (
    Bug(
        1,
        "slugify keeps runs of separators\n\n`slugify('a -- b __ c')` gives `a----b----c`; "
        "runs of non-alphanumeric characters should become one separator: `a-b-c`.",
        "textkit/slug.py",
        '    words = re.split(r"[^a-z0-9]+", text.lower())\n'
        "    return sep.join(word for word in words if word)\n",
        '    words = re.split(r"[^a-z0-9]", text.lower())\n    return sep.join(words).strip(sep)\n',
        "tests/test_slug.py",
        "def test_collapses_repeated_separators():\n"
        '    assert slugify("a -- b __ c") == "a-b-c"\n\n\n',
        ("tests/test_slug.py::test_collapses_repeated_separators",),
        (
            "tests/test_slug.py::test_lowercases",
            "tests/test_slug.py::test_strips",
            "tests/test_slug.py::test_custom_separator",
        ),
    ),
    Bug(
        2,
        "ordinal(11) is '11st'\n\n`ordinal` gives 11st, 12nd and 13rd; the teens take 'th'.",
        "textkit/numbers.py",
        "    if 10 <= n % 100 <= 20:\n",
        "    if n % 100 in (10, 20):\n",
        "tests/test_numbers.py",
        '@pytest.mark.parametrize("n", [11, 12, 13])\ndef test_teens(n):\n'
        '    assert ordinal(n) == f"{n}th"\n\n\n',
        (
            "tests/test_numbers.py::test_teens[11]",
            "tests/test_numbers.py::test_teens[12]",
            "tests/test_numbers.py::test_teens[13]",
        ),
        (
            "tests/test_numbers.py::test_ordinals_basic",
            "tests/test_numbers.py::test_twenties",
            "tests/test_numbers.py::test_parse_int",
        ),
    ),
    Bug(
        3,
        "camel_to_snake runs acronyms together\n\n`camel_to_snake('HTTPRequest')` gives "
        "`httprequest`; it should be `http_request`.",
        "textkit/case.py",
        '    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\\1_\\2", name)\n',
        "",
        "tests/test_case.py",
        "    def test_acronym(self):\n"
        '        assert camel_to_snake("HTTPRequest") == "http_request"\n',
        ("tests/test_case.py::TestCamel::test_acronym",),
        ("tests/test_case.py::TestCamel::test_simple", "tests/test_case.py::test_snake_to_camel"),
    ),
    Bug(
        4,
        "wrap splits a line that fits exactly\n\n`wrap('abc def', 7)` gives two lines; a "
        "line of exactly `width` characters fits.",
        "textkit/wrap.py",
        "        if len(candidate) <= width:\n",
        "        if len(candidate) < width:\n",
        "tests/test_wrap.py",
        'def test_exact_width():\n    assert wrap("abc def", 7) == ["abc def"]\n\n\n',
        ("tests/test_wrap.py::test_exact_width",),
        ("tests/test_wrap.py::test_short_text", "tests/test_wrap.py::test_long_words_stay_whole"),
    ),
)
# model-b's textkit-4: the fix, plus long words cut to the width (breaks a PASS_TO_PASS test).
BREAK_4 = ("            line = word\n", "            line = word[:width]\n")


def git(repo: Path, *args: str, stdin: str | None = None) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args],
        env=ENV,
        input=stdin,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def replaced(text: str, old: str, new: str, where: str) -> str:
    if text.count(old) != 1:
        raise SystemExit(f"build_dataset: {where}: expected the text once: {old!r}")
    return text.replace(old, new)


def diff_after(repo: Path, base: str, edits: dict[str, str]) -> str:
    """The patch that turns ``base`` into it with ``edits`` (path -> new text), as git
    writes it."""
    git(repo, "checkout", "-q", "--detach", base)
    for path, text in edits.items():
        (repo / path).write_text(text)
    patch = git(repo, "diff")
    git(repo, "checkout", "-q", "--", ".")
    return patch


def build(out: Path) -> dict[str, Path]:
    """Write the dataset into ``out`` (replaced); the paths of what it wrote."""
    if out.exists():
        shutil.rmtree(out)
    repo = out / "repos" / REPO.replace("/", "__")
    shutil.copytree(SOURCE, repo, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "textkit 1.0")
    clean = git(repo, "rev-parse", "HEAD").strip()
    instances, model_a, model_b = [], [], []
    for bug in BUGS:
        instance_id = f"textkit-{bug.number}"
        fixed_source = (repo / bug.source).read_text()
        fixed_test = (repo / bug.test_file).read_text()
        broken_source = replaced(fixed_source, bug.fixed, bug.broken, bug.source)
        base_test = replaced(fixed_test, bug.test_block, "", bug.test_file)
        git(repo, "checkout", "-q", "--detach", clean)
        (repo / bug.source).write_text(broken_source)
        (repo / bug.test_file).write_text(base_test)
        git(repo, "commit", "-q", "-am", f"{instance_id}: before the fix")
        base = git(repo, "rev-parse", "HEAD").strip()
        git(repo, "branch", "-q", "-f", f"base-{bug.number}", base)
        gold = diff_after(repo, base, {bug.source: fixed_source})
        test_patch = diff_after(repo, base, {bug.test_file: fixed_test})
        instances.append(
            {
                "instance_id": instance_id,
                "repo": REPO,
                "base_commit": base,
                "patch": gold,
                "test_patch": test_patch,
                "problem_statement": bug.problem,
                "hints_text": "",
                "created_at": "2024-01-01T00:00:00Z",
                "version": "1.0",
                "environment_setup_commit": clean,
                "FAIL_TO_PASS": json.dumps(list(bug.fail_to_pass)),
                "PASS_TO_PASS": json.dumps(list(bug.pass_to_pass)),
            }
        )
        if bug.number in (1, 2):
            model_a.append(_prediction(instance_id, "model-a", gold))
        if bug.number == 4:
            model_a.append(_prediction(instance_id, "model-a", ""))
            broken_fix = replaced(fixed_source, *BREAK_4, bug.source)
            model_b.append(
                _prediction(
                    instance_id, "model-b", diff_after(repo, base, {bug.source: broken_fix})
                )
            )
        else:
            model_b.append(_prediction(instance_id, "model-b", gold))
    git(repo, "checkout", "-q", "main")
    paths = {
        "repos": out / "repos",
        "instances": out / "instances.jsonl",
        "model-a": out / "preds-model-a.jsonl",
        "model-b": out / "preds-model-b.jsonl",
    }
    for key, rows in (("instances", instances), ("model-a", model_a), ("model-b", model_b)):
        paths[key].write_text("".join(json.dumps(row, sort_keys=True) + "\n" for row in rows))
    return paths


def _prediction(instance_id: str, model: str, patch: str) -> dict[str, str]:
    return {"instance_id": instance_id, "model_name_or_path": model, "model_patch": patch}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "data")
    args = parser.parse_args()
    paths = build(args.out)
    print(f"wrote {args.out}: {len(BUGS)} instances, repository {paths['repos']}")


if __name__ == "__main__":
    main()
