"""``execute_trial``: one job, from a fresh agent sandbox to a graded ``Trial`` record.

The same plain function runs under the local pool and under the Celery task.

Phase A (agent): a fresh sandbox; the fixture (minus forbidden paths) is copied
into ``/workspace``; a baseline commit is made in the root-only ``/baseline``;
the agent acts under the task's wall-clock limit (a command agent under
``guard.py``, which kills every other process of the agent's uid the moment the
agent's program exits); a sweep kills whatever is left; then the patch is what
``git diff`` writes on stdout against the baseline, byte for byte.

The patch is screened (``runner.grading.patch_policy``): what would change how grading
runs is dropped and counted. Phase B (``runner.grading.verify``) applies the rest in a
second fresh sandbox the agent never saw and runs the hidden tests.

Who is to blame: a failure of the engine, the network or deltarun is outcome
``error``. A failure caused by what the agent controls (its files, their names
and sizes, its answer, its processes, a sandbox they ended: ``runner.sandbox.blame``)
is a miss, an invalid completion or a timeout, with the reason in the record. Both
sandboxes are removed in ``finally``, on every path.
"""

from __future__ import annotations

import time
from dataclasses import replace

from runner import telemetry
from runner.agents.interface import Agent, AgentContext, AgentResult
from runner.errors import DeltarunError
from runner.grading.metrics import score_answer
from runner.records import (
    AnswerTask,
    Grading,
    Job,
    RepoTask,
    Task,
    TaskKind,
    Trial,
    grading_of,
    task_timeout,
)
from runner.sandbox.base import (
    BASELINE_DIR,
    WORKSPACE,
    SandboxLost,
)
from runner.trees.staging import StagedFixture
from runner.trial.env import TrialEnv
from runner.trial.limits import trial_limits
from runner.trial.record import Facts, build_record, error_record
from runner.trial.sandbox_specs import (
    RUN_BUDGET_STOP,
    agent_access,
    agent_image,
    priced,
    sandbox_spec,
)
from runner.trial.verify_phase import grade_now, take_and_screen, verify_patch
from runner.trial.workspace import (
    baseline,
    copy_in,
    install,
    staged_trees,
    stop_agent,
)


def execute_trial(job: Job, task: Task, agent: Agent, env: TrialEnv) -> Trial:
    """Run one job and return its record. Never raises for agent or infrastructure failures
    (they become outcomes); ``KeyboardInterrupt`` propagates after the sandboxes are removed."""
    started_at = env.clock()
    t0 = time.monotonic()
    retries = 0
    while True:
        facts = Facts()
        try:
            _run_phases(job, task, agent, env, facts)
        except DeltarunError as exc:
            facts.error = f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # an unexpected bug is an infra error, recorded, not lost
            facts.error = f"{type(exc).__name__}: {exc}"
        if facts.error is None or retries >= env.controls.runtime.max_retries:
            break
        retries += 1
    wall_s = time.monotonic() - t0
    try:
        return build_record(
            job,
            task,
            facts,
            caps=env.controls.runtime.caps,
            worker=env.worker,
            started_at=started_at,
            finished_at=env.clock(),
            wall_s=wall_s,
            retries=retries,
        )
    except Exception as exc:  # a record that cannot be built is deltarun's error, not a lost job
        return error_record(
            job,
            task,
            env.worker,
            f"{type(exc).__name__}: {exc}",
            started_at,
            wall_s,
            env.clock(),
        )


def _run_phases(job: Job, task: Task, agent: Agent, env: TrialEnv, facts: Facts) -> None:
    """The agent phase, then the verdict: an answer task's metrics, or phase B."""
    fixture = env.fixture(task)
    with telemetry.phase("agent"):
        try:
            agent_wall = _agent_phase(job, task, agent, env, fixture, facts)
        except SandboxLost as lost:  # what the agent ran ended its sandbox: the agent's miss
            facts.agent_sandbox_lost(lost)
            return
    result = facts.agent
    if agent_wall is None or result is None or task.kind is TaskKind.NEGATIVE:
        return
    if result.abstained or result.stop_reason in ("budget_exhausted", RUN_BUDGET_STOP):
        # the agent's own miss
        return
    if isinstance(task, AnswerTask):
        if result.answer_present and not result.answer_invalid:
            facts.passed, facts.metrics = score_answer(result.answer, task, agent_wall, env.metrics)
        return
    with telemetry.phase("verify"):
        verify_patch(job, task, env, fixture, facts.applied or b"", facts)


def _agent_phase(
    job: Job, task: Task, agent: Agent, env: TrialEnv, fixture: StagedFixture, facts: Facts
) -> float | None:
    """Sandbox A: the agent acts, everything it started is stopped, its patch is taken and
    screened. The agent's wall time, or None when the trial ends here (the reason in facts)."""
    controls = env.controls
    timeout_s = task_timeout(task, controls.runtime.timeout_s)
    forbidden = tuple(controls.tools.forbidden_paths)
    access = agent_access(agent, controls)
    spec = sandbox_spec(
        job, agent_image(task, agent, env), env, timeout_s, agent.needs_agent_dir, access=access
    )
    spec = replace(spec, staged_trees=staged_trees(fixture, forbidden, baseline=True))
    with env.sandboxes.open(spec) as sandbox:
        facts.image_digest = sandbox.image_digest
        facts.limits = trial_limits(controls, job.arm, task, sandbox.applied)
        if WORKSPACE not in sandbox.prefilled:
            copy_in(sandbox, fixture.workspace_tar(forbidden))
        kit = None if BASELINE_DIR in sandbox.prefilled else fixture.baseline_tar(forbidden)
        prompt = agent.toggles.prompt(task.prompt) if agent.toggles else task.prompt
        baseline(sandbox, prompt, guard=agent.runs_programs, staged=kit)
        if isinstance(task, RepoTask) and task.install:
            problem = install(sandbox, task.install, timeout_s)
            if problem is not None:
                facts.setup_note = f"[deltarun] in the agent's sandbox: {problem}\n"
        hidden_test = None
        if isinstance(task, RepoTask) and grading_of(task) is not Grading.NONE:

            def hidden_test() -> bool:
                return grade_now(job, task, env, fixture, sandbox)

        context = AgentContext(
            sandbox,
            task,
            timeout_s,
            forbidden,
            controls.runtime.caps.output_bytes,
            prompt=prompt,
            repeat=job.repeat,
            hidden_test=hidden_test,
        )
        agent_t0 = time.monotonic()
        facts.agent = agent.run(context)
        if access is not None:  # priced, and stopped by the run's budget or not
            facts.agent = priced(facts.agent, access, sandbox.model_calls())
        agent_wall = time.monotonic() - agent_t0
        if agent.runs_programs:
            stop_agent(sandbox)
        if not _agent_ended_well(facts.agent, timeout_s, facts):
            return None
        if isinstance(task, RepoTask) and not take_and_screen(
            job, task, env, fixture, sandbox, facts
        ):
            return None
    return agent_wall


def _agent_ended_well(result: AgentResult, timeout_s: float, facts: Facts) -> bool:
    """False, with the outcome's facts, when the agent phase itself decides the trial."""
    if result.error is not None:
        facts.error = result.error  # the endpoint failed: infrastructure, not the agent
        return False
    if result.timed_out:
        facts.timed_out = True
        facts.reason = f"the agent ran past its limit of {timeout_s:g}s"
        return False
    if result.guard_broken:
        facts.tool_violation = True
        facts.reason = "the agent ended deltarun's guard process"
        return False
    return True
