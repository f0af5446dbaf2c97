"""``execute_trial``: one job, from a fresh agent sandbox to a graded ``Trial`` record.

The same plain function runs under the local pool and under the Celery task.

Phase A (agent): a fresh sandbox; the fixture (minus forbidden paths) is copied
into ``/workspace``; a baseline commit is made in the root-only ``/baseline``;
the agent acts under the task's wall-clock limit; leftover agent processes are
killed; the patch is taken with ``git diff`` against the baseline.

Phase B (verify): a second fresh sandbox the agent never saw: the full
fixture, the patch applied with ``git apply``, then the hidden files written
over whatever the patch put at their paths, then ``hidden_test``; exit 0 is a
pass. Both sandboxes are removed in ``finally``, on every path.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

from runner.agents import AGENT_ENV, PROMPT_FILE, Agent, AgentContext, AgentResult
from runner.archives import Member, build_tar, layered_tar, single_file_tar
from runner.controls import Controls, parse_size
from runner.errors import DeltarunError, InfraError
from runner.hashing import sha256_bytes
from runner.metrics import BUILTIN, Metric, score_answer
from runner.models import AnswerTask, Job, Outcome, RepoTask, Task, TaskKind, Trial, task_timeout
from runner.outcomes import classify
from runner.patches import drop_chunks, drop_forbidden, drop_protected, is_grading_path
from runner.sandbox.base import (
    AGENT_UID,
    BASELINE_DIR,
    IO_DIR,
    ROOT_USER,
    WORKSPACE,
    ExecRequest,
    Limits,
    ModelAccess,
    Sandbox,
    SandboxFactory,
    SandboxSpec,
)

# Patches up to this size are verified; the record stores at most caps.patch_bytes.
MAX_VERIFY_PATCH_BYTES = 64 << 20
# A prompt up to this size travels in one environment string (Linux allows 128 KiB).
MAX_ENV_PROMPT_BYTES = 100 << 10
# Exit code of the verify step when the agent's patch does not apply (a miss).
PATCH_FAILED_EXIT = 97
SANDBOX_LIFETIME_MARGIN_S = 120.0
_GIT_ENV = {
    "GIT_DIR": f"{BASELINE_DIR}/git",
    "GIT_WORK_TREE": WORKSPACE,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "HOME": BASELINE_DIR,
    "PATH": "/usr/bin:/bin",
}
# Harness git: no hooks, no fsmonitor, whatever the workspace contains.
GIT = "git -c core.hooksPath=/dev/null -c core.fsmonitor=false"


class TrialInputs(Protocol):
    """Where a worker gets the checked archives of a task (local files or a remote cache)."""

    def fixture(self, task: RepoTask) -> list[Member]: ...

    def hidden(self, task: RepoTask) -> list[Member]: ...


@dataclass(frozen=True)
class TrialEnv:
    """Everything ``execute_trial`` needs besides the job itself."""

    controls: Controls
    inputs: TrialInputs
    sandboxes: SandboxFactory
    worker: str
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    metrics: Mapping[str, Metric] = field(default_factory=lambda: dict(BUILTIN))


def limits_of(controls: Controls) -> Limits:
    spec = controls.runtime.limits
    return Limits(
        memory_bytes=parse_size(spec.memory),
        nano_cpus=int(spec.cpus * 1e9),
        pids=spec.pids,
        workspace_bytes=parse_size(spec.workspace),
    )


def image_of(task: Task, controls: Controls) -> str:
    if isinstance(task, RepoTask) and task.image:
        return task.image
    return controls.runtime.image


@dataclass
class _Facts:
    agent: AgentResult | None = None
    patch: str = ""
    patch_truncated: bool = False
    tool_violation: bool = False
    passed: bool = False
    timed_out: bool = False
    verify_exit_code: int | None = None
    verify_log: str = ""
    verify_log_truncated: bool = False
    verify_oom_killed: bool = False
    image_digest: str = ""
    error: str | None = None


def execute_trial(job: Job, task: Task, agent: Agent, env: TrialEnv) -> Trial:
    """Run one job and return its record. Never raises for agent or infrastructure failures
    (they become outcomes); ``KeyboardInterrupt`` propagates after the sandboxes are removed."""
    started_at = env.clock()
    t0 = time.monotonic()
    retries = 0
    while True:
        facts = _Facts()
        try:
            _run_phases(job, task, agent, env, facts)
        except DeltarunError as exc:
            facts.error = f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # an unexpected bug is an infra error, recorded, not lost
            facts.error = f"{type(exc).__name__}: {exc}"
        if facts.error is None or retries >= env.controls.runtime.max_retries:
            break
        retries += 1
    return _record(job, task, env, facts, started_at, time.monotonic() - t0, retries)


def _record(
    job: Job,
    task: Task,
    env: TrialEnv,
    facts: _Facts,
    started_at: datetime,
    wall_s: float,
    retries: int,
) -> Trial:
    result = facts.agent or AgentResult()
    outcome = classify(
        kind=task.kind,
        infra_error=facts.error is not None,
        timed_out=facts.timed_out,
        abstained=result.abstained,
        passed=facts.passed,
    )
    cap = env.controls.runtime.caps.patch_bytes
    patch_bytes = facts.patch.encode("utf-8", "surrogateescape")
    stored = patch_bytes[:cap].decode("utf-8", "replace")
    return Trial(
        run_id=job.run_id,
        job_id=job.job_id,
        protocol_sha256=job.protocol_sha256,
        task_id=job.task_id,
        arm=job.arm,
        repeat=job.repeat,
        task_kind=task.kind,
        outcome=outcome,
        passed=outcome is Outcome.SUCCESS,
        timeout=outcome is Outcome.TIMEOUT,
        tool_violation=facts.tool_violation or result.tool_violation,
        abstained=result.abstained and outcome is not Outcome.ERROR,
        prompt_tokens=result.prompt_tokens,
        completion_tokens=result.completion_tokens,
        wall_s=round(wall_s, 3),
        retries_used=retries,
        tool_calls=result.tool_calls,
        patch=stored,
        patch_sha256=sha256_bytes(patch_bytes) if patch_bytes else "",
        patch_truncated=facts.patch_truncated or len(patch_bytes) > cap,
        answer=result.answer if result.answer_present else None,
        verify_exit_code=facts.verify_exit_code,
        verify_log=facts.verify_log,
        verify_log_truncated=facts.verify_log_truncated,
        agent_log=result.log[-env.controls.runtime.caps.output_bytes :],
        agent_log_truncated=result.log_truncated
        or len(result.log) > env.controls.runtime.caps.output_bytes,
        oom_killed=result.oom_killed or facts.verify_oom_killed,
        agent_exit_code=result.exit_code,
        error=facts.error,
        stop_reason=result.stop_reason,
        route_mismatch=result.route_mismatch,
        transcript=result.transcript,
        transcript_truncated=result.transcript_truncated,
        worker=env.worker,
        image_digest=facts.image_digest,
        attempt=retries + 1,
        started_at=started_at.isoformat(),
        finished_at=env.clock().isoformat(),
    )


def model_access(controls: Controls) -> ModelAccess | None:
    """The agent sandbox's one way out under ``network: model-only``; None otherwise."""
    route = controls.route
    if controls.runtime.network != "model-only" or route is None:
        return None
    return ModelAccess(route.base_url, route.api_key_env, controls.runtime.model_network)


def preflight_spec(controls: Controls, image: str) -> SandboxSpec:
    """The spec of the start-up check: the run's limits, runtime and network (gateway too)."""
    return SandboxSpec(
        image=image,
        limits=limits_of(controls),
        lifetime_s=60,
        labels={"run": "preflight", "job": "preflight"},
        oci_runtime=controls.runtime.oci_runtime,
        model_access=model_access(controls),
    )


def _spec(
    job: Job, image: str, env: TrialEnv, lifetime: float, agent_dir: bool, io: bool = True
) -> SandboxSpec:
    """Under ``model-only`` a command agent's sandbox A reaches the model (a command agent is
    the one kind that calls it itself); sandbox B (verify) never does."""
    return SandboxSpec(
        image=image,
        limits=limits_of(env.controls),
        lifetime_s=lifetime + SANDBOX_LIFETIME_MARGIN_S,
        labels={"run": job.run_id, "job": job.job_id},
        with_agent_dir=agent_dir,
        with_io=io,
        oci_runtime=env.controls.runtime.oci_runtime,
        model_access=model_access(env.controls) if io and agent_dir else None,
    )


def _run_phases(job: Job, task: Task, agent: Agent, env: TrialEnv, facts: _Facts) -> None:
    controls = env.controls
    timeout_s = task_timeout(task, controls.runtime.timeout_s)
    forbidden = tuple(controls.tools.forbidden_paths)
    output_cap = controls.runtime.caps.output_bytes
    image = image_of(task, controls)
    fixture: list[Member] = env.inputs.fixture(task) if isinstance(task, RepoTask) else []

    spec = _spec(job, image, env, timeout_s, agent.needs_agent_dir)
    with env.sandboxes.open(spec) as sandbox:
        facts.image_digest = sandbox.image_digest
        _copy_in(sandbox, fixture, exclude=forbidden)
        prompt = agent.toggles.prompt(task.prompt) if agent.toggles else task.prompt
        _baseline(sandbox, prompt)
        hidden_test = None
        if isinstance(task, RepoTask) and task.hidden_test:

            def hidden_test() -> bool:
                return _grade_now(job, task, env, fixture, sandbox)

        context = AgentContext(
            sandbox,
            task,
            timeout_s,
            forbidden,
            output_cap,
            prompt=prompt,
            repeat=job.repeat,
            hidden_test=hidden_test,
        )
        agent_t0 = time.monotonic()
        result = agent.run(context)
        agent_wall = time.monotonic() - agent_t0
        facts.agent = result
        if result.error is not None:
            facts.error = result.error  # the endpoint failed: infrastructure, not the agent
            return
        if result.timed_out:
            facts.timed_out = True
            return
        if isinstance(task, RepoTask):
            patch, truncated = _take_patch(sandbox)
            kept, dropped = drop_forbidden(patch, forbidden)
            facts.patch, facts.patch_truncated = kept, truncated
            facts.tool_violation = bool(dropped)

    if task.kind is TaskKind.NEGATIVE or result.abstained:
        return
    if isinstance(task, AnswerTask):
        if result.answer_present and not result.answer_invalid:
            facts.passed, _ = score_answer(result.answer, task, agent_wall, env.metrics)
        return
    if facts.patch_truncated:
        return  # a patch over the verify cap cannot be applied: a miss, and the record says why
    _verify(job, task, env, fixture, facts)


def _grade_now(
    job: Job, task: RepoTask, env: TrialEnv, fixture: list[Member], sandbox: Sandbox
) -> bool:
    """The hidden test's verdict on the agent's changes so far, in a separate fresh sandbox."""
    patch, truncated = _take_patch(sandbox)
    kept, _dropped = drop_forbidden(patch, tuple(env.controls.tools.forbidden_paths))
    if truncated:
        return False
    probe = _Facts(patch=kept)
    _verify(job, task, env, fixture, probe)
    return probe.passed and not probe.timed_out


def _copy_in(sandbox: Sandbox, fixture: list[Member], exclude: tuple[str, ...] = ()) -> None:
    if fixture:
        sandbox.put_archive(
            WORKSPACE, build_tar(fixture, uid=AGENT_UID, gid=AGENT_UID, exclude=exclude)
        )


def _root(
    sandbox: Sandbox, script: str, timeout_s: float = 120.0, env: dict[str, str] | None = None
) -> bytes:
    """Run a harness shell script as root (no capabilities); an infra error if it fails."""
    result = sandbox.run(
        ExecRequest(
            argv=["sh", "-c", script],
            user=ROOT_USER,
            env={**_GIT_ENV, **(env or {})},
            timeout_s=timeout_s,
            output_cap=1 << 16,
        )
    )
    if result.exit_code != 0 or result.timed_out:
        tail = result.output[-500:].decode("utf-8", "replace")
        raise InfraError(f"harness step failed (exit {result.exit_code}): {tail}")
    return result.output


def _baseline(sandbox: Sandbox, prompt: str) -> None:
    """Commit the workspace as given into /baseline (root-only) and write the prompt file.

    One exec instead of two: the prompt travels in the environment of this root
    process, which has ended before the agent starts. A prompt too large for
    one environment string is copied in as a file instead.
    """

    script = (
        f"{GIT} init -q && {GIT} add -A && {GIT} -c user.name=deltarun "
        "-c user.email=deltarun@localhost commit -q --no-verify --allow-empty -m baseline"
    )
    data = prompt.encode("utf-8")
    if len(data) <= MAX_ENV_PROMPT_BYTES:
        script += f' && printf %s "$DELTARUN_PROMPT" > {PROMPT_FILE} && chmod 0444 {PROMPT_FILE}'
        _root(sandbox, script, env={"DELTARUN_PROMPT": prompt})
        return
    _root(sandbox, script)
    sandbox.put_archive(
        IO_DIR,
        single_file_tar("prompt.txt", data, uid=0, gid=0, mode=0o444),
    )


def _make_readable(sandbox: Sandbox) -> None:
    """Kill what the agent left running and make its files readable to the harness.

    Only needed when the agent hid files from the diff (for example ``chmod 000``).
    """
    sandbox.run(
        ExecRequest(
            argv=[
                "sh",
                "-c",
                "kill -9 -1 2>/dev/null; kill -9 -1 2>/dev/null; "
                f"chmod -R u+rwX,go+rX {WORKSPACE} 2>/dev/null; true",
            ],
            env=AGENT_ENV,
            timeout_s=60,
        )
    )


def _take_patch(sandbox: Sandbox) -> tuple[str, bool]:
    """The agent's changes as a binary-safe git diff against the baseline.

    Agent processes that outlived the agent command may still run: they cannot
    touch the root-owned baseline or signal this root process, and they die with
    the sandbox right after. If the agent made files unreadable, they are made
    readable (as the agent user) and the diff is taken again.
    """

    request = ExecRequest(
        argv=[
            "sh",
            "-c",
            f"{GIT} add -A && {GIT} diff --cached --binary --no-color "
            "--no-ext-diff --no-textconv --no-renames HEAD",
        ],
        user=ROOT_USER,
        env=_GIT_ENV,
        timeout_s=120,
        output_cap=MAX_VERIFY_PATCH_BYTES,
    )
    result = sandbox.run(request)
    if result.exit_code != 0 and not result.output_truncated:
        _make_readable(sandbox)
        result = sandbox.run(request)
    if result.exit_code != 0 and not result.output_truncated:
        raise InfraError(f"taking the patch failed (exit {result.exit_code})")
    return result.output.decode("utf-8", "surrogateescape"), result.output_truncated


def reverify(trial: Trial, task: RepoTask, env: TrialEnv) -> bool | None:
    """Run the hidden test again on a recorded patch in a fresh sandbox; the new verdict.

    ``None`` when the record has no verdict to re-check (abstained, timed out,
    errored, or a patch too large to store whole).
    """
    if trial.outcome not in (Outcome.SUCCESS, Outcome.MISS) or trial.patch_truncated:
        return None
    if trial.patch_sha256 and sha256_bytes(trial.patch.encode("utf-8", "surrogateescape")) != (
        trial.patch_sha256
    ):
        return None
    job = Job(
        job_id=trial.job_id,
        run_id=trial.run_id,
        protocol_sha256=trial.protocol_sha256,
        task_id=trial.task_id,
        arm=trial.arm,
        repeat=trial.repeat,
    )
    facts = _Facts(patch=trial.patch)
    _verify(job, task, env, env.inputs.fixture(task), facts)
    if facts.timed_out:
        return False
    return facts.passed


def _verify(job: Job, task: RepoTask, env: TrialEnv, fixture: list[Member], facts: _Facts) -> None:
    """Phase B: fixture + patch + hidden files in a fresh sandbox; exit 0 of hidden_test passes."""
    controls = env.controls
    hidden = env.inputs.hidden(task)
    verify_timeout = controls.runtime.verify_timeout_s
    spec = _spec(job, image_of(task, controls), env, verify_timeout, False, io=False)
    hidden_files = {m.path for m in hidden if not m.is_dir}
    # Hidden files stand as written: patch chunks at their paths are dropped.
    patch, _overridden = drop_protected(facts.patch, hidden_files)
    # Files that steer the test runner keep the fixture's version: the verdict with
    # a tampering patch equals the verdict without it.
    grading = controls.tools.grading_paths
    patch, tampered = drop_chunks(patch, lambda path: is_grading_path(path, grading))
    if tampered:
        facts.tool_violation = True
    patch_name = f".deltarun-{secrets.token_hex(8)}.patch"
    layers: list[tuple[list[Member], int, int]] = [(fixture, AGENT_UID, AGENT_UID)]
    if patch:
        data = patch.encode("utf-8", "surrogateescape")
        layers.append(([Member(patch_name, False, data, False)], AGENT_UID, AGENT_UID))
    layers.append((hidden, 0, 0))  # root-owned: the code under test cannot rewrite them
    assert task.hidden_test is not None
    apply = (
        f"git apply --whitespace=nowarn {patch_name} || "
        f"{{ echo 'deltarun: the patch does not apply' >&2; exit {PATCH_FAILED_EXIT}; }}; "
        f"rm -f {patch_name}; "
        if patch
        else ""
    )
    script = f'{apply}exec sh -c "$DELTARUN_HIDDEN_TEST"'
    with env.sandboxes.open(spec) as sandbox:
        sandbox.put_archive(WORKSPACE, layered_tar(layers))
        result = sandbox.run(
            ExecRequest(
                argv=["sh", "-c", script],
                env={**AGENT_ENV, "DELTARUN_HIDDEN_TEST": task.hidden_test},
                timeout_s=verify_timeout,
                output_cap=controls.runtime.caps.output_bytes,
            )
        )
        facts.verify_log = result.output[-controls.runtime.caps.output_bytes :].decode(
            "utf-8", "replace"
        )
        facts.verify_log_truncated = result.output_truncated
        facts.verify_oom_killed = result.oom_killed
        if result.timed_out:
            facts.timed_out = True
            return
        facts.verify_exit_code = result.exit_code
        facts.passed = result.exit_code == 0
