"""An exec whose output the engine cut short (moby/moby#27289: the stream ends before the
command's last output, exit code 0) is never read as a whole answer: the patch command
prints an end mark after the patch and is run again without it, and a patch that never
arrives whole is infrastructure, never an agent's empty patch graded a miss. Seen here
under load as an agent that had edited, graded a miss with an empty patch."""

from __future__ import annotations

import pytest

from runner.errors import SandboxError
from runner.sandbox.base import Limits, SandboxSpec
from runner.sandbox.fake import FakeSandbox, FakeSandboxFactory
from runner.trial.workspace import PATCH_TRIES, take_patch

SPEC = SandboxSpec(
    image="deltarun/sandbox-python:bookworm",
    limits=Limits(memory_bytes=256 << 20, nano_cpus=10**9, pids=64, workspace_bytes=16 << 20),
    lifetime_s=60,
    labels={"run": "cut-output", "job": "patch"},
)
PATCH = b"diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1 +1 @@\n-a\n+b\n"


def diffs(sandbox: FakeSandbox) -> int:
    return sum(" diff --cached " in " ".join(r.argv) for r in sandbox.requests)


@pytest.mark.parametrize("cut", [0, 1, PATCH_TRIES - 1])
def test_a_patch_cut_short_is_taken_again_and_arrives_whole(cut: int) -> None:
    with FakeSandboxFactory().open(SPEC) as sandbox:
        assert isinstance(sandbox, FakeSandbox)
        sandbox.patch, sandbox.cut_patches = PATCH, cut
        assert take_patch(sandbox) == (PATCH, False, None)
        assert diffs(sandbox) == cut + 1


def test_an_empty_patch_is_an_empty_patch() -> None:
    with FakeSandboxFactory().open(SPEC) as sandbox:
        assert isinstance(sandbox, FakeSandbox)
        assert take_patch(sandbox) == (b"", False, None)
        assert diffs(sandbox) == 1


def test_a_patch_that_never_arrives_whole_is_infrastructure_not_an_empty_patch() -> None:
    with FakeSandboxFactory().open(SPEC) as sandbox:
        assert isinstance(sandbox, FakeSandbox)
        sandbox.patch, sandbox.cut_patches = PATCH, PATCH_TRIES
        with pytest.raises(SandboxError, match="cut the output of the patch command short"):
            take_patch(sandbox)
        assert diffs(sandbox) == PATCH_TRIES
