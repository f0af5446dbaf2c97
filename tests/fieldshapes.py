"""SWE-bench instances in the shapes the field ships, over real releases from their sdists:
Django 4.2 graded by its own ``tests/runtests.py`` (ids ``test_x (module.Class)`` and a
docstring's first line) and sympy 1.12 graded by sympy's runner (bare function names).

Written into ``out`` as ``tests.realprojects.build`` writes its dataset (the same sdist
cache, pinned sha256, fixed commit dates):

    repos/django__django/, repos/sympy__sympy/   the release (Django trimmed to the
                                                 package, less translations, and the
                                                 test files the instance needs), then
                                                 one commit that injects the bug and
                                                 drops the tests that catch it
    instances.jsonl, specs.yaml                  SWE-bench's fields and specs (its own
                                                 test_cmd for each repository)
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.realprojects.build import (
    Project,
    cache_dir,
    diff_after,
    git,
    replaced,
    sdist,
    unpack,
)

DJANGO = Project(
    "django/django", "Django", "4.2", "Django-4.2.tar.gz",
    "c36e2ab12824e2ac36afa8b2515a70c53c7742f0d6eaefa7311ec379558db997",
    "4.2", ".", ("tests/runtests.py",),
)  # fmt: skip
SYMPY = Project(
    "sympy/sympy", "sympy", "1.12", "sympy-1.12.tar.gz",
    "ebf595c8dac3e0fdc4152c51878b498396ec7f30e7a914d6071e674d49420fb8",
    "1.12", ".", ("bin/test",),
)  # fmt: skip
# Django's tests folder as the instance needs it: the runner, its settings, one app.
DJANGO_TESTS = ("runtests.py", "test_sqlite.py", "urls.py", "utils_tests/__init__.py")
DJANGO_TEST_FILE = "tests/utils_tests/test_text.py"
SYMPY_FILES = ("setup.py", "setup.cfg", "pyproject.toml", "README.md", "LICENSE")
SPECS = {
    "django/django": {
        "4.2": {
            "python": "3.11",
            "pip_packages": ["asgiref==3.6.0", "sqlparse==0.4.4"],
            "test_cmd": "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1",
        }
    },
    "sympy/sympy": {
        "1.12": {
            "python": "3.11",
            "pip_packages": ["mpmath==1.3.0"],
            "test_cmd": "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' "
            "bin/test -C --verbose",
        }
    },
}
DOCSTRING = "capfirst() capitalises only the first letter of a sentence."
NEW_DJANGO_TEST = (
    "    def test_capfirst_sentence(self):\n"
    f'        """{DOCSTRING}\n\n        Regression test for the instance.\n        """\n'
    '        self.assertEqual(text.capfirst("hello world"), "Hello world")\n'
    '        self.assertEqual(text.capfirst("h"), "H")\n\n'
)


@dataclass(frozen=True)
class Shape:
    instance_id: str
    project: Project
    source: str
    fixed: str
    broken: str
    test_file: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    problem: str


SHAPES = (
    Shape(
        "django__django-90001",
        DJANGO,
        "django/utils/text.py",
        "    return x[0].upper() + x[1:]\n",
        "    return x[0].upper() + x[2:]\n",
        DJANGO_TEST_FILE,
        (DOCSTRING, "test_capfirst_word (utils_tests.test_text.TestUtilsText)"),
        (
            "test_normalize_newlines (utils_tests.test_text.TestUtilsText.test_normalize_newlines)",
            "test_wrap (utils_tests.test_text.TestUtilsText)",
        ),
        "capfirst() drops the second letter: capfirst('hello') gives 'Hllo'.",
    ),
    Shape(
        "sympy__sympy-90002",
        SYMPY,
        "sympy/utilities/iterables.py",
        "    y = y % len(x)\n    return x[y:] + x[:y]\n",
        "    y = (y + 1) % len(x)\n    return x[y:] + x[:y]\n",
        "sympy/utilities/tests/test_iterables.py",
        ("test_rotate",),
        ("test_flatten", "test_group"),
        "rotate_left([0, 1, 2], 1) gives [2, 0, 1]; it should give [1, 2, 0].",
    ),
)

# What _release takes from each sdist (folders, then single files): the rest (Django's
# tests and docs, sympy's doc) is never unpacked.
TAKEN = {DJANGO.repo: ("django",), SYMPY.repo: ("sympy", *SYMPY_FILES)}
TAKEN_FILES = {("tests", *name.split("/")) for name in DJANGO_TESTS} | {
    tuple(DJANGO_TEST_FILE.split("/"))
}


def _taken(project: Project, parts: tuple[str, ...]) -> bool:
    """Whether _release keeps the sdist's file at ``parts``: of Django, neither the
    translations of its apps nor of a language but English."""
    if parts[0] not in TAKEN[project.repo] and parts not in TAKEN_FILES:
        return False
    if project is DJANGO and "locale" in parts[:-1]:
        at = parts.index("locale")
        return "conf" in parts[:at] and (len(parts) == at + 2 or parts[at + 1] == "en")
    return True


def _release(project: Project, archive: Path, repo: Path) -> str:
    """The release as the repository's first commit (Django trimmed); its id."""
    unpacked = repo.parent / f".{repo.name}.unpacked"
    shutil.rmtree(unpacked, ignore_errors=True)
    unpacked.mkdir(parents=True)
    unpack(archive, unpacked, lambda parts: _taken(project, parts))
    repo.mkdir(parents=True)
    if project is DJANGO:
        shutil.copytree(
            unpacked / "django",
            repo / "django",
            ignore=lambda d, names: [n for n in names if n == "locale" and "conf" not in d],
        )
        locale = repo / "django" / "conf" / "locale"
        for entry in locale.iterdir():
            if entry.is_dir() and entry.name != "en":
                shutil.rmtree(entry)
        for name in DJANGO_TESTS:
            (repo / "tests" / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(unpacked / "tests" / name, repo / "tests" / name)
        shutil.copy2(unpacked / DJANGO_TEST_FILE, repo / DJANGO_TEST_FILE)
    else:
        shutil.copytree(unpacked / "sympy", repo / "sympy")
        for name in SYMPY_FILES:
            if (unpacked / name).exists():
                shutil.copy2(unpacked / name, repo / name)
    shutil.rmtree(unpacked)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-f", "-A")
    git(repo, "commit", "-q", "-m", f"{project.dist} {project.release}, from its sdist")
    return git(repo, "rev-parse", "HEAD").strip()


def _instance(repo: Path, clean: str, shape: Shape) -> dict[str, str]:
    git(repo, "checkout", "-q", "--detach", clean)
    fixed_source = (repo / shape.source).read_text(encoding="utf-8")
    released_test = (repo / shape.test_file).read_text(encoding="utf-8")
    if shape.project is DJANGO:
        # The test patch adds two tests; the base has neither.
        anchor = "    def test_get_text_list(self):\n"
        word = (
            "    def test_capfirst_word(self):\n"
            '        self.assertEqual(text.capfirst("django"), "Django")\n\n'
        )
        fixed_test = replaced(released_test, anchor, NEW_DJANGO_TEST + word + anchor, "test")
        base_test = released_test
    else:
        fixed_test = released_test
        start = released_test.index("def test_rotate():")
        end = released_test.index("\ndef ", start + 1)
        base_test = released_test[:start] + released_test[end + 1 :].lstrip("\n")
    broken = replaced(fixed_source, shape.fixed, shape.broken, shape.source)
    (repo / shape.source).write_text(broken, encoding="utf-8")
    (repo / shape.test_file).write_text(base_test, encoding="utf-8")
    git(repo, "commit", "-q", "-am", f"{shape.instance_id}: before the fix")
    base = git(repo, "rev-parse", "HEAD").strip()
    return {
        "instance_id": shape.instance_id,
        "repo": shape.project.repo,
        "base_commit": base,
        "patch": diff_after(repo, base, {shape.source: fixed_source}),
        "test_patch": diff_after(repo, base, {shape.test_file: fixed_test}),
        "problem_statement": shape.problem,
        "hints_text": "",
        "created_at": "2024-01-01T00:00:00Z",
        "version": shape.project.version,
        "environment_setup_commit": clean,
        "FAIL_TO_PASS": json.dumps(list(shape.fail_to_pass)),
        "PASS_TO_PASS": json.dumps(list(shape.pass_to_pass)),
    }


def build(out: Path, cache: Path | None = None) -> dict[str, Path]:
    """Write the instances, repositories and specs into ``out``; their paths."""
    rows = []
    for shape in SHAPES:
        archive = sdist(shape.project, cache or cache_dir())
        repo = out / "repos" / shape.project.dirname
        clean = _release(shape.project, archive, repo)
        rows.append(_instance(repo, clean, shape))
        git(repo, "checkout", "-q", "main")
    paths = {
        "repos": out / "repos",
        "instances": out / "instances.jsonl",
        "specs": out / "specs.yaml",
    }
    paths["instances"].write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    paths["specs"].write_text(yaml.safe_dump(SPECS, sort_keys=True), encoding="utf-8")
    return paths
