"""execute_trial on the real Docker engine: pass, miss, timeout, abstain, hiding, blindness."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from runner.agents.factory import agent_members, make_agent
from runner.config.loader import load_controls
from runner.records import Job, Outcome, Trial
from runner.sandbox.docker import DockerSandboxFactory
from runner.suite.load import load_suite
from runner.trees.inputs import LocalInputs
from runner.trial.env import trial_env
from runner.trial.execute import execute_trial
from tests.conftest import leftover_sandboxes
from tests.helpers import ADD_FIXTURE, ADD_GOLD, make_suite, repo_task, write_agent

pytestmark = pytest.mark.docker


def run_one(
    docker_api: Any, controls_path: Path, task_id: str, arm: str, run_id: str | None = None
) -> Trial:
    """One trial on the engine; its run id (``trial.run_id``) is unique unless given, so that
    the leak check sees this trial's sandboxes only, never a parallel test's."""
    run_id = run_id or f"run-under-test-{uuid.uuid4().hex[:12]}"
    loaded = load_controls(controls_path)
    suite = load_suite(loaded.suite_path, loaded.controls.suite.sha256)
    spec = next(a for a in loaded.controls.arms if a.name == arm)
    # The executors' own environment: fixtures staged in the cache, as in every run.
    env = trial_env(loaded.controls, LocalInputs(suite), DockerSandboxFactory(docker_api), "test")
    job = Job(
        job_id=f"job-{task_id}-{arm}",
        run_id=run_id,
        protocol_sha256="p" * 64,
        task_id=task_id,
        arm=arm,
        repeat=0,
    )
    trial = execute_trial(
        job,
        suite.task(task_id),
        make_agent(spec.agent, agent_members(spec.agent, loaded.base)),
        env,
    )
    assert leftover_sandboxes(docker_api, run=run_id) == ([], [])
    return trial


def test_gold_patch_passes_and_noop_misses(tmp_path: Path, docker_api: Any) -> None:
    (tmp_path / "gold").mkdir()
    (tmp_path / "gold" / "t1.diff").write_text(ADD_GOLD)
    controls = make_suite(
        tmp_path,
        [repo_task("t1")],
        [
            {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
            {"name": "gold", "agent": {"type": "patch", "dir": "gold"}},
        ],
    )
    gold = run_one(docker_api, controls, "t1", "gold")
    assert gold.outcome is Outcome.SUCCESS, gold
    assert gold.passed and gold.verify_exit_code == 0
    assert "+    return a + b" in gold.patch and len(gold.patch_sha256) == 64
    assert gold.image_digest.startswith("sha256:")
    noop = run_one(docker_api, controls, "t1", "ctrl")
    assert noop.outcome is Outcome.MISS and not noop.passed
    assert noop.patch == "" and noop.verify_exit_code not in (0, None)


def test_command_agent_edits_are_verified(tmp_path: Path, docker_api: Any) -> None:
    fixer = write_agent(tmp_path, "fixer", "sed -i 's/a - b/a + b/' calc/__init__.py\n")
    breaker = write_agent(
        tmp_path, "breaker", "echo 'def add(a, b): return 0' > calc/__init__.py\n"
    )
    controls = make_suite(
        tmp_path,
        [repo_task("t1")],
        [
            {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
            {"name": "fixer", "agent": fixer},
            {"name": "breaker", "agent": breaker},
        ],
    )
    assert run_one(docker_api, controls, "t1", "fixer").outcome is Outcome.SUCCESS
    assert run_one(docker_api, controls, "t1", "breaker").outcome is Outcome.MISS


def test_sleeping_agent_times_out_and_leaves_nothing(tmp_path: Path, docker_api: Any) -> None:
    sleeper = write_agent(tmp_path, "sleeper", "sleep 600\n")
    controls = make_suite(
        tmp_path,
        [repo_task("t1", timeout_s=3)],
        [
            {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
            {"name": "sleeper", "agent": sleeper},
        ],
    )
    trial = run_one(docker_api, controls, "t1", "sleeper")
    assert trial.outcome is Outcome.TIMEOUT
    assert trial.timeout and not trial.passed and trial.error is None
    assert trial.wall_s < 60
    assert leftover_sandboxes(docker_api, run=trial.run_id) == ([], [])


def test_abstention_is_read_from_the_abstain_file(tmp_path: Path, docker_api: Any) -> None:
    refuser = write_agent(
        tmp_path, "refuser", 'echo "MAPPING.md is missing" > "$DELTARUN_ABSTAIN_FILE"\n'
    )
    controls = make_suite(
        tmp_path,
        [repo_task("neg", kind="negative", hidden=False), repo_task("t1")],
        [
            {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
            {"name": "refuser", "agent": refuser},
        ],
    )
    negative = run_one(docker_api, controls, "neg", "refuser")
    assert negative.outcome is Outcome.ABSTAIN_OK and negative.abstained
    ordinary = run_one(docker_api, controls, "t1", "refuser")
    assert ordinary.outcome is Outcome.FALSE_ABSTAIN
    noop = run_one(docker_api, controls, "neg", "ctrl")
    assert noop.outcome is Outcome.INVALID_COMPLETION and not noop.abstained


def test_forbidden_paths_and_hidden_tests_are_absent(tmp_path: Path, docker_api: Any) -> None:
    fixture = {**ADD_FIXTURE, ".git/config": "[core]\n", "secrets/key.txt": "s3cret\n"}
    # The agent reports what it can see by writing it into an answer file of the workspace.
    probe = write_agent(
        tmp_path,
        "probe",
        "\n".join(
            [
                "find / \\( -path /proc -o -path /sys -o -path /dev -o -path /usr \\) -prune -o -print 2>/dev/null | sort > seen.txt",
                "cat /baseline/git/HEAD >> seen.txt 2>&1 || echo baseline-unreadable >> seen.txt",
                "ls -la /workspace >> seen.txt",
                "ln -s /baseline/git leak || true",
                "cat leak/HEAD >> seen.txt 2>&1 || echo symlink-unreadable >> seen.txt",
                "env | sort > env.txt",
                "",
            ]
        ),
    )
    controls = make_suite(
        tmp_path,
        [repo_task("t1")],
        [
            {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
            {"name": "probe", "agent": probe},
        ],
        fixtures={"t1": fixture},
        tools={"allowlist": [], "forbidden_paths": [".git/", "secrets"]},
    )
    trial = run_one(docker_api, controls, "t1", "probe")
    seen = trial.patch
    assert "+/workspace/calc/__init__.py" in seen  # the probe did run and report
    assert "/workspace/.git" not in seen
    assert "/workspace/secrets" not in seen
    assert "test_hidden" not in seen
    assert "baseline-unreadable" in seen and "symlink-unreadable" in seen
    env_lines = [line for line in seen.splitlines() if line.startswith("+") and "=" in line]
    env_text = "\n".join(env_lines)
    for secret in ("run-under-test", "job-t1", "probe", "ctrl", "control"):
        assert secret not in env_text, f"{secret!r} visible to the agent"
    assert "DELTARUN_PROMPT_FILE=/io/prompt.txt" in env_text


def test_docker_refusing_a_limit_is_a_clear_error(tmp_path: Path, docker_api: Any) -> None:
    controls = make_suite(
        tmp_path,
        [repo_task("t1")],
        [
            {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
        ],
        runtime={"limits": {"memory": "1k"}},
    )
    trial = run_one(docker_api, controls, "t1", "ctrl")
    assert trial.outcome is Outcome.ERROR
    assert trial.error is not None and "memory" in trial.error.lower()


def test_background_processes_do_not_outlive_the_phase(tmp_path: Path, docker_api: Any) -> None:
    evader = write_agent(
        tmp_path,
        "evader",
        "setsid nohup sh -c 'sleep 1000' >/dev/null 2>&1 &\n"
        "(sh -c 'sleep 1000 &' &)\n"
        "trap '' TERM\n"
        "exit 0\n",
    )
    stubborn = write_agent(
        tmp_path, "stubborn", "trap '' TERM INT HUP\nwhile :; do sleep 1; done\n"
    )
    controls = make_suite(
        tmp_path,
        [repo_task("t1", timeout_s=3)],
        [
            {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
            {"name": "evader", "agent": evader},
            {"name": "stubborn", "agent": stubborn},
        ],
    )
    evaded = run_one(docker_api, controls, "t1", "evader")  # asserts no sandbox is left
    assert evaded.outcome is Outcome.MISS and evaded.error is None
    ignored = run_one(docker_api, controls, "t1", "stubborn")
    assert ignored.outcome is Outcome.TIMEOUT and ignored.wall_s < 60
    assert leftover_sandboxes(docker_api, run=evaded.run_id) == ([], [])
    assert leftover_sandboxes(docker_api, run=ignored.run_id) == ([], [])


@pytest.mark.parametrize("nested_git", [False, True], ids=["staged", "in-sandbox"])
def test_the_baseline_finds_untouched_files_clean_and_edits_changed(
    tmp_path: Path, docker_api: Any, nested_git: bool
) -> None:
    """The staged baseline (made on the host, ``runner.trees.staging``) and the one the sandbox
    makes itself (a fixture path git refuses, here a nested ``.git``) give the same
    result: git finds every untouched file clean by its stat data alone, and an edit,
    a new file and a deletion are in the patch."""
    from runner.sandbox.base import BASELINE_DIR, ROOT_USER, ExecRequest, Limits, SandboxSpec
    from runner.trees.archives import Member
    from runner.trees.cache import CacheDir
    from runner.trees.staging import Staging
    from runner.trial.workspace import _GIT_ENV, GIT, STAT_CHECK, baseline, copy_in, take_patch

    files = {f"pkg/m{i:03d}.py": f"x = {i}\n" for i in range(300)} | ADD_FIXTURE
    if nested_git:
        files["vendor/.git/HEAD"] = "ref: refs/heads/main\n"
    fixture = [Member(path, False, data.encode(), False) for path, data in files.items()]
    run = f"baseline-test-{uuid.uuid4().hex[:12]}"
    staging = Staging(CacheDir(tmp_path / "cache"))
    workspace = staging.workspace("tar:test", lambda: fixture, ())
    kit = staging.baseline("tar:test", lambda: fixture, ())
    assert (kit is None) is nested_git
    spec = SandboxSpec(
        image="deltarun/sandbox-python:bookworm",
        limits=Limits(memory_bytes=512 << 20, nano_cpus=10**9, pids=128, workspace_bytes=64 << 20),
        lifetime_s=120,
        labels={"run": run},
    )
    with DockerSandboxFactory(docker_api).open(spec) as sandbox:
        copy_in(sandbox, workspace)
        baseline(sandbox, "prompt", guard=False, staged=kit)
        clean = sandbox.run(
            ExecRequest(
                argv=["sh", "-c", f"{GIT} {STAT_CHECK} diff-files --quiet"],
                user=ROOT_USER,
                env=_GIT_ENV,
                workdir=BASELINE_DIR,
            )
        )
        assert clean.exit_code == 0, clean.output
        edit = "sed -i 's/x = 7/x = 8/' pkg/m007.py && echo new > added.txt && rm pkg/m100.py"
        assert sandbox.run(ExecRequest(argv=["sh", "-c", edit])).exit_code == 0
        patch, truncated, problem = take_patch(sandbox)
    assert problem is None and not truncated
    text = patch.decode()
    assert text.count("diff --git") == 3, text
    assert "+x = 8" in text and "+new" in text and "deleted file mode" in text
    assert leftover_sandboxes(docker_api, run=run) == ([], [])
