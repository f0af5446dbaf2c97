"""The verify sandbox's space (issue 23, class 5): what the patched tree takes is the agent's.

A patch can unpack to far more than its length (a compressed binary patch of a
file of zeros, a sparse file git reads as zeros). Whether the patched tree fits
in ``runtime.limits.workspace`` is the agent's outcome (a miss, with the reason);
the harness's own files have room beside the limit, so they never run short and
the trial is never an infrastructure ``error`` for it. A fixture file rewritten in place
takes no more of the cap than in a copy, whichever path the workspace takes (a copy-free
view used to count it twice: issue 36, item 7).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runner.records import Outcome
from tests.helpers import ADD_FIXTURE, make_suite, repo_task, write_agent
from tests.test_trial_docker import run_one

pytestmark = pytest.mark.docker

FIX = "sed -i 's/a - b/a + b/' calc/__init__.py\n"
# Fill the agent's own workspace to the last block with zeros (git's patch of them is tiny).
FILL = (
    "dd if=/dev/zero of=pad.bin bs=64k 2>/dev/null || true\n"
    "dd if=/dev/zero of=pad2.bin bs=4k 2>/dev/null || true\n"
)
# Overwrite the start of t3's big.bin, no truncation (the room a copy needs for it: none).
REWRITE = "python3 -c \"f = open('big.bin', 'r+b'); f.write(b'rewritten'); f.close()\" || exit 1\n"
# The task each attack runs (t1 otherwise).
TASKS = {"a forbidden path's room taken": "t2", "a big file rewritten in place": "t3"}
# (what was tried, the script, the outcome, a word of the reason when it is a miss)
ATTACKS: dict[str, tuple[str, str, Outcome, str]] = {
    "fill to the brim": (
        "fix add(); fill /workspace to the last block with zeros",
        FIX + FILL,
        Outcome.SUCCESS,
        "",
    ),
    "a forbidden path's room taken": (
        "fix add(); fill /workspace, whose fixture's .git/ (forbidden) the verify tree has",
        FIX + FILL,
        Outcome.MISS,
        "runtime.limits.workspace",
    ),
    "a big file rewritten in place": (
        "rewrite a 16 MiB fixture file in place under a 24 MiB cap, fix add(), fill to the brim",
        REWRITE + FIX + FILL,
        Outcome.SUCCESS,
        "",
    ),
    "a sparse file": (
        "fix add(); a 256 MiB sparse file (the full tmpfs cannot give git its pages)",
        FIX + "truncate -s 256M big.bin\n",
        Outcome.MISS,
        "git add was killed",
    ),
}


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("space")
    arms: list[dict[str, Any]] = [
        {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
    ]
    for i, (_, script, _, _) in enumerate(ATTACKS.values()):
        arms.append({"name": f"a{i}", "agent": write_agent(root, f"a{i}", script)})
    # t2's fixture carries 4 MiB under .git/: absent from the agent's workspace, present
    # in the verify sandbox's tree. t3's, a 16 MiB file: two thirds of the cap.
    blob = bytes(range(256)) * (16 << 10)
    fixtures = {
        "t2": {**ADD_FIXTURE, ".git/objects/pack/blob": blob},
        "t3": {**ADD_FIXTURE, "big.bin": b"\0" * (16 << 20)},
    }
    return make_suite(
        root,
        [repo_task("t1"), repo_task("t2"), repo_task("t3")],
        arms,
        fixtures=fixtures,
        runtime={"limits": {"workspace": "24m", "memory": "1g"}},
    )


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a_tree_that_does_not_fit_is_the_agents(
    attack: str, suite: Path, docker_api: Any, held: Callable[..., None]
) -> None:
    tried, _, expected, because = ATTACKS[attack]
    task = TASKS.get(attack, "t1")
    trial = run_one(docker_api, suite, task, f"a{list(ATTACKS).index(attack)}")
    held(f"space: {attack}", tried, f"{trial.outcome.value}: {trial.reason or 'graded'}")
    assert trial.error is None, trial.error
    assert trial.outcome is expected, (trial.outcome, trial.reason, trial.verify_log[-800:])
    assert because in (trial.reason or ""), trial.reason
