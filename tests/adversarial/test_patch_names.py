"""A real fix beside files whose names git quotes is graded on its merits (issue 23, item 9).

git writes a name holding a double quote, a backslash, a control byte or a byte
over 0x7f C-quoted, and puts a TAB after every name that holds a space:
``+++ "b/notes \\303\\251.txt"<TAB>``. The patch reader refused that, so the
whole patch was "the patch could not be read as git writes it" and a correct
fix became a miss. Here command agents make the fix and add such files (text,
binary and empty, so that some sections name their file in the ``diff --git``
line alone), through the real ``execute_trial`` on Docker: the fix must pass
with nothing dropped, and a quoted name must not carry a runner file past the
grading policy.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runner import gitpatch
from runner.records import Outcome
from runner.trial.record import patch_of
from tests.helpers import make_suite, repo_task, write_agent
from tests.test_trial_docker import run_one

pytestmark = pytest.mark.docker

FIX = "sed -i 's/a - b/a + b/' calc/__init__.py\n"
# Each holds a space and a byte git quotes; "data" files are binary, "empty" ones empty.
NAMES = {
    "notes \u00e9.txt": "text",
    'say "hi" now.txt': "text",
    "tab\there now.txt": "text",
    "back\\slash dir/x y.py": "text",
    "new\nline here.txt": "text",
    "data \u00e9.bin": "binary",
    'empty \u00e9 "q".txt': "empty",
}
# A runner file and a package init under quoted directory names: dropped as when bare.
SNEAKY = {
    "t\u00e9sts dir/conftest.py": "text",
    'tests/"q" dir/conftest.py': "text",
}


def shell_word(name: str) -> str:
    """A double-quoted shell word that expands to ``name``: every byte other than a letter,
    digit, space, '.', '_' or '-' is an octal escape for the sandbox's ``printf``."""
    safe = {ord(c) for c in " ._-"}
    escaped = "".join(
        chr(b) if chr(b).isascii() and (chr(b).isalnum() or b in safe) else f"\\{b:03o}"
        for b in name.encode()
    )
    return f"\"$(printf '{escaped}')\""


def write_names(names: dict[str, str]) -> str:
    """An agent script (sh) that creates each file with its kind of content."""
    lines = []
    for index, (name, kind) in enumerate(names.items()):
        if "/" in name:
            lines.append(f"mkdir -p {shell_word(name.rsplit('/', 1)[0])}")
        content = {"text": f"file {index}\\n", "binary": f"\\000\\001bin {index}\\000"}
        lines.append(f"printf '{content.get(kind, '')}' > {shell_word(name)}")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("patch-names")
    return make_suite(
        root,
        [repo_task("t1")],
        [
            {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
            {"name": "names", "agent": write_agent(root, "names", FIX + write_names(NAMES))},
            {
                "name": "sneaky",
                "agent": write_agent(root, "sneaky", FIX + write_names({**NAMES, **SNEAKY})),
            },
        ],
    )


def test_a_fix_beside_quoted_names_passes(
    suite: Path, docker_api: Any, held: Callable[..., None]
) -> None:
    trial = run_one(docker_api, suite, "t1", "names")
    stored = patch_of(trial)
    files = gitpatch.parse(stored)
    held(
        "patch names: quoted names beside a fix",
        "the fix plus new files named with a space and \u00e9, '\"', TAB, '\\\\', newline "
        "(text, binary, empty)",
        f"{trial.outcome.value}, {len(files)} sections, "
        f"dropped {', '.join(trial.dropped) or 'nothing'}",
    )
    assert trial.outcome is Outcome.SUCCESS, (trial.reason, trial.verify_log[-1500:])
    assert not trial.tool_violation and trial.dropped == []
    assert b'+++ "b/notes \\303\\251.txt"\t\n' in stored  # git's quoting and its TAB
    assert sorted(f.new_path or "" for f in files) == sorted([*NAMES, "calc/__init__.py"])
    binary = next(f for f in files if f.new_path == "data \u00e9.bin")
    assert binary.binary and binary.old_path is None


def test_a_quoted_name_does_not_carry_a_runner_file_past_the_policy(
    suite: Path, docker_api: Any, held: Callable[..., None]
) -> None:
    trial = run_one(docker_api, suite, "t1", "sneaky")
    held(
        "patch names: runner files under quoted names",
        "conftest.py in directories named with \u00e9 and '\"', beside the fix",
        f"{trial.outcome.value}, dropped {', '.join(trial.dropped) or 'nothing'}",
    )
    assert trial.outcome is Outcome.SUCCESS, (trial.reason, trial.verify_log[-1500:])
    assert trial.tool_violation
    assert sorted(trial.dropped) == sorted(f"{name} (test runner configuration)" for name in SNEAKY)
    applied = gitpatch.parse(patch_of(trial))  # the stored patch is the agent's, whole
    assert {p for f in applied for p in f.paths} >= set(SNEAKY)
