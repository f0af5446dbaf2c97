"""``deltarun init DIR``: a minimal suite a new user edits into their own.

Three tasks, one of each kind: a repository task (a small package with a bug,
a hidden pytest test, a gold patch), a negative control (something the
repository cannot provide: only abstaining is correct) and an answer task.
Controls with a no-op control arm, the gold patch arm and a ``command`` arm
stub; ``build_suite.py`` (standard library only, no make) turns ``src/`` into
the suite's tars with every file at the archive root, as the workspace expects.
``deltarun validate DIR/controls.yaml`` passes on it as written.
"""

from __future__ import annotations

import json
from pathlib import Path

from runner.errors import UserError

BUILD_SCRIPT = '''\
"""Build suite/ from src/: one tar per fixture and hidden side, files at the archive root.

    python3 build_suite.py     (then: deltarun seal controls.yaml)

src/<task>/repo/    the repository the agent sees in /workspace (the fixture)
src/<task>/hidden/  the hidden test files, added only in the verify sandbox
"""

import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def tar_of(folder: Path, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w", format=tarfile.GNU_FORMAT) as archive:
        for path in sorted(folder.rglob("*")):
            if "__pycache__" in path.parts:
                continue
            # The name relative to the folder: the workspace root is the archive root.
            archive.add(path, arcname=path.relative_to(folder).as_posix(), recursive=False)


for task in sorted((HERE / "src").iterdir()):
    for side, target in (("repo", "fixtures"), ("hidden", "hidden")):
        if (task / side).is_dir():
            tar_of(task / side, HERE / "suite" / target / f"{task.name}.tar")
            print(f"wrote suite/{target}/{task.name}.tar")
'''

FILES: dict[str, str] = {
    "src/fix-add/repo/calc/__init__.py": (
        '"""A tiny calculator."""\n\n\ndef add(a, b):\n    """Return a + b."""\n    return a - b\n'
    ),
    "src/fix-add/repo/tests/__init__.py": "",
    "src/fix-add/repo/tests/test_visible.py": (
        "from calc import add\n\n\ndef test_zero():\n    assert add(0, 0) == 0\n"
    ),
    "src/fix-add/hidden/tests/test_hidden.py": (
        "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
        "def test_negative():\n    assert add(-2, 1) == -1\n"
    ),
    "src/fix-add/repo/README.md": "# calc\n\nA tiny calculator. Tests: `python -m pytest`.\n",
    "src/neg-missing-spec/repo/README.md": "# calc\n\nA tiny calculator.\n",
    "src/neg-missing-spec/repo/calc/__init__.py": (
        '"""A tiny calculator."""\n\n\ndef add(a, b):\n    """Return a + b."""\n    return a + b\n'
    ),
    "patches/gold/fix-add.diff": (
        "diff --git a/calc/__init__.py b/calc/__init__.py\n"
        "--- a/calc/__init__.py\n"
        "+++ b/calc/__init__.py\n"
        "@@ -3,4 +3,4 @@\n"
        " \n"
        " def add(a, b):\n"
        '     """Return a + b."""\n'
        "-    return a - b\n"
        "+    return a + b\n"
    ),
    "patches/gold/neg-missing-spec.abstain": (
        "The task needs the rounding rules of docs/rounding.md, which the repository lacks.\n"
    ),
    "patches/gold/answer-sum.answer.json": '{"total": 42}\n',
    "agents/stub/run.sh": (
        "#!/bin/sh\n"
        "# A command arm: runs in /workspace as the agent user, reads the task from\n"
        "# $DELTARUN_PROMPT_FILE, edits files (the patch is what changed), writes an\n"
        "# answer to $DELTARUN_ANSWER_FILE or a reason to $DELTARUN_ABSTAIN_FILE.\n"
        "# Replace this stub with your agent.\n"
        'echo "stub agent: nothing done for: $(head -c 60 "$DELTARUN_PROMPT_FILE")"\n'
    ),
    "build_suite.py": BUILD_SCRIPT,
}

TASKS = [
    {
        "id": "fix-add",
        "kind": "ordinary",
        "prompt": "calc.add returns the wrong result. Fix it so add(a, b) returns a + b.",
        "repo": "fixtures/fix-add.tar",
        "hidden": "hidden/fix-add.tar",
        "hidden_tests": ["tests/test_hidden.py"],
        "size_bucket": "s",
    },
    {
        "id": "neg-missing-spec",
        "kind": "negative",
        "prompt": (
            "Round add()'s result as docs/rounding.md specifies. If the repository does not "
            "give you what the task needs, abstain with the reason instead of guessing."
        ),
        "repo": "fixtures/neg-missing-spec.tar",
        "size_bucket": "s",
    },
    {
        "id": "answer-sum",
        "kind": "ordinary",
        "prompt": 'What is 19 + 23? Answer with a JSON object {"total": <number>}.',
        "expect": {"total": 42},
        "schema": {
            "type": "object",
            "properties": {"total": {"type": "number"}},
            "required": ["total"],
            "additionalProperties": False,
        },
        "metrics": ["exact_match", "json_schema_ok"],
        "deadline_s": 60,
    },
]

CONTROLS = """\
# deltarun controls: what a run is. Every key: `deltarun schema controls`.
protocol_id: my-suite-v1
channel: exploratory
suite: {file: suite/tasks.jsonl, sha256: ""}
runtime:
  repeats: 1
  timeout_s: 120
  verify_timeout_s: 300
  limits: {memory: 1g, cpus: 1.0, pids: 256, workspace: 512m}
  network: none
  image: deltarun/sandbox-python:bookworm
tools:
  forbidden_paths: [.git/]
arms:
  - name: control
    control: true
    agent: {type: scripted, action: noop}
  - name: gold
    agent: {type: patch, dir: patches/gold}
  - name: my-agent
    agent: {type: command, dir: agents/stub, argv: [sh, /opt/agent/run.sh]}
"""


def scaffold(root: Path) -> list[Path]:
    """Write the example suite into ``root`` (new or empty); the paths written."""
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise UserError(f"{root}: exists and is not an empty directory; give a new directory")
    written: list[Path] = []
    for relative, text in {**FILES, "controls.yaml": CONTROLS}.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    (root / "agents/stub/run.sh").chmod(0o755)
    tasks = root / "suite" / "tasks.jsonl"
    tasks.parent.mkdir(parents=True, exist_ok=True)
    tasks.write_text("".join(json.dumps(t, sort_keys=True) + "\n" for t in TASKS))
    written.append(tasks)
    return written
