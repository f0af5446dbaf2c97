"""An agent cannot turn its miss into an infrastructure error (class 3 of issue 10).

Outcome ``error`` is excluded from pass rates, so an arm that could make its own
failures end as errors would erase its misses. Each agent here leaves behind
something that once broke the harness (names git refuses, attributes that
re-encode or filter, a nested repository, a workspace the baseline cannot
hold, answers no parser takes); every trial must end as the agent's own
outcome with a reason, never as ``error``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runner.records import Outcome
from tests.adversarial.support import PROBE_TASK
from tests.helpers import make_suite, repo_task, write_agent
from tests.test_trial_docker import run_one

pytestmark = pytest.mark.docker

FIX = "sed -i 's/a - b/a + b/' calc/__init__.py\n"
REPO_ATTACKS: dict[str, tuple[str, str]] = {
    # name: (what was tried, script); every one also fixes the bug, so the verdict can pass
    "names git refuses": (
        "files named GIT~1, d/.git., .GIT/x, con.git",
        "echo y > 'GIT~1'; mkdir -p d .GIT; echo z > 'd/.git.'; echo w > .GIT/x\n",
    ),
    "working-tree-encoding": (
        ".gitattributes: * working-tree-encoding=UTF-16 over non-UTF-16 files",
        "printf '* working-tree-encoding=UTF-16\\n' > .gitattributes\n",
    ),
    "filters and binary": (
        ".gitattributes: * filter=evil diff=evil binary eol=crlf",
        "printf '* filter=evil diff=evil -text binary eol=crlf ident\\n' > .gitattributes\n",
    ),
    "nested repository": (
        "sub/.git pointing at a missing gitdir, and an embedded real repository",
        "mkdir -p sub emb && echo 'gitdir: /nonexistent' > sub/.git && echo x > sub/f && "
        "git -C emb init -q && echo e > emb/e\n",
    ),
    "special files": (
        "a FIFO, a socket, a symlink loop, a dangling symlink",
        'mkfifo fifo; python3 -c "import socket; s=socket.socket(socket.AF_UNIX); '
        "s.bind('sock')\"; ln -s loop loop; ln -s /nonexistent dangling\n",
    ),
    "hostile names": (
        "names with newlines, tabs, quotes, bytes that are not UTF-8",
        "echo a > \"$(printf 'new\\nline')\"; echo b > \"$(printf 'tab\\there')\"; "
        "echo c > 'q\"uote'; echo d > \"$(printf 'bad\\377name')\"\n",
    ),
    "deep directories": (
        "a tree 300 directories deep",
        "d=.; for i in $(seq 300); do d=$d/d; done; mkdir -p $d && echo x > $d/f\n",
    ),
    "unreadable files": (
        "chmod 000 on a new file and directory",
        "mkdir locked && echo x > locked/f && echo s > secret && chmod 000 secret locked\n",
    ),
}
ANSWER_ATTACKS: dict[str, tuple[str, str]] = {
    "huge integer": ("an answer holding a 5,000-digit integer", "python3 -c \"print('9' * 5000)\""),
    "deep nesting": (
        "an answer nested 20,000 deep",
        "python3 -c \"print('[' * 20000 + ']' * 20000)\"",
    ),
    "NaN": ("an answer of NaN", "echo '{\"x\": NaN}'"),
    "lone surrogate": ("an answer with a lone surrogate escape", "echo '[\"\\ud800\"]'"),
    "not UTF-8": ("an answer that is not UTF-8", "printf '\"\\377\\376\"'"),
    "huge float": ("an answer of 1e999", "echo '1e999'"),
}


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("blame")
    arms: list[dict[str, Any]] = [
        {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
    ]
    for index, (_, script) in enumerate(REPO_ATTACKS.values()):
        arms.append({"name": f"r{index}", "agent": write_agent(root, f"r{index}", FIX + script)})
    for index, (_, command) in enumerate(ANSWER_ATTACKS.values()):
        script = f'{command} > "$DELTARUN_ANSWER_FILE"\n'
        arms.append({"name": f"a{index}", "agent": write_agent(root, f"a{index}", script)})
    filler = "head -c 46000000 /dev/urandom > big1; head -c 46000000 /dev/urandom > big2\n"
    arms.append({"name": "filler", "agent": write_agent(root, "filler", filler)})
    answer = {**PROBE_TASK, "id": "answer", "expect": {"x": 1}, "metrics": ["exact_match"]}
    return make_suite(
        root,
        [repo_task("t1"), answer],
        arms,
        runtime={"limits": {"workspace": "96m", "memory": "512m"}},
    )


@pytest.mark.parametrize("attack", list(REPO_ATTACKS))
def test_what_the_agent_leaves_is_never_an_infrastructure_error(
    attack: str, suite: Path, docker_api: Any, held: Callable[..., None]
) -> None:
    index = list(REPO_ATTACKS).index(attack)
    trial = run_one(docker_api, suite, "t1", f"r{index}")
    held(
        f"blame: {attack}",
        REPO_ATTACKS[attack][0],
        f"{trial.outcome.value}" + (f": {trial.reason}" if trial.reason else ""),
    )
    assert trial.error is None, trial.error
    assert trial.outcome in (Outcome.SUCCESS, Outcome.MISS), trial
    if trial.outcome is Outcome.MISS:
        assert trial.reason, "a miss the harness caused must say why"


@pytest.mark.parametrize("attack", list(ANSWER_ATTACKS))
def test_an_unreadable_answer_is_a_miss_with_a_reason(
    attack: str, suite: Path, docker_api: Any, held: Callable[..., None]
) -> None:
    index = list(ANSWER_ATTACKS).index(attack)
    trial = run_one(docker_api, suite, "answer", f"a{index}")
    held(
        f"blame: answer {attack}",
        ANSWER_ATTACKS[attack][0],
        f"{trial.outcome.value}: {trial.reason}",
    )
    assert trial.outcome is Outcome.MISS and trial.error is None, trial
    assert trial.answer is None and trial.reason


def test_a_workspace_too_large_to_copy_is_a_miss(
    suite: Path, docker_api: Any, held: Callable[..., None]
) -> None:
    trial = run_one(docker_api, suite, "t1", "filler")
    held(
        "blame: workspace too large for the harness to copy",
        "92 MB of random data: the diff is over the verify cap",
        f"{trial.outcome.value}: {trial.reason}",
    )
    assert trial.error is None and trial.outcome is Outcome.MISS, trial
    assert trial.reason
