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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from typing import Protocol

from runner import telemetry
from runner.agents.installed.agent import Installed
from runner.agents.interface import Agent, AgentContext, AgentResult
from runner.config.controls import Controls
from runner.errors import DeltarunError, UserError
from runner.gitpatch import PatchError
from runner.grading.image_facts import image_facts, module_names
from runner.grading.metrics import BUILTIN, Metric, score_answer
from runner.grading.patch_policy import Ground, Screened, screen
from runner.grading.runners import harness_paths
from runner.grading.verify import VerifyOutcome, VerifySettings, sandbox_bytes, verify
from runner.hashing import sha256_bytes
from runner.records import (
    AnswerTask,
    Grading,
    Job,
    Outcome,
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
    Limits,
    ModelAccess,
    Sandbox,
    SandboxFactory,
    SandboxLost,
    SandboxSpec,
)
from runner.sizes import parse_size
from runner.trees.archives import Member
from runner.trees.staging import StagedFixture, Staging, fixture_key
from runner.trial.limits import trial_limits
from runner.trial.record import Facts, build_record, error_record, patch_of
from runner.trial.workspace import (
    MAX_VERIFY_PATCH_BYTES,
    baseline,
    copy_in,
    install,
    staged_trees,
    stop_agent,
    take_patch,
)

SANDBOX_LIFETIME_MARGIN_S = 120.0


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
    # Fixture tars and baselines made once per machine; None builds them per trial.
    staging: Staging | None = None
    # Image tag → the ID the run pins: every sandbox is made from that ID (a moved tag, or
    # an image a worker was told to pull, never decides what a trial runs in).
    pins: Mapping[str, str] = field(default_factory=dict)

    def fixture(self, task: Task) -> StagedFixture:
        """A task's fixture for one trial, read only when a staged entry must be made
        (``runner.trees.staging``); an answer task has none."""
        caps = self.controls.runtime.archive_caps
        if not isinstance(task, RepoTask):
            return StagedFixture(None, lambda: [], None, caps)
        load = partial(self.inputs.fixture, task)
        return StagedFixture(fixture_key(task), load, self.staging, caps, harness_paths(task))


def limits_of(controls: Controls) -> Limits:
    spec = controls.runtime.limits
    return Limits(
        memory_bytes=parse_size(spec.memory),
        nano_cpus=int(spec.cpus * 1e9),
        pids=spec.pids,
        workspace_bytes=parse_size(spec.workspace),
    )


def image_of(task: Task, controls: Controls) -> str:
    """The sandbox image of a task: its environment's, its own, or the runtime's default."""
    if isinstance(task, RepoTask):
        if task.environment is not None:
            if task.environment_tag is None:
                raise UserError(
                    f"task {task.id!r}: environment {task.environment!r} is not built; run "
                    "`deltarun build` on the suite (it pins the image), then seal the controls"
                )
            return task.environment_tag
        if task.image:
            return task.image
    return controls.runtime.image


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


def agent_access(agent: Agent, controls: Controls) -> ModelAccess | None:
    """Sandbox A's way to the model: an installed CLI's own route with the trial's budget;
    under ``model-only`` a command agent's top-level route; no other agent calls the model
    from inside the sandbox."""
    if isinstance(agent, Installed):
        budget = controls.budget
        price = controls.prices.get(agent.route.model)
        return ModelAccess(
            agent.route.base_url,
            agent.route.api_key_env,
            controls.runtime.model_network,
            budget_tokens=budget.trial_tokens if budget else None,
            budget_usd=budget.trial_usd if budget else None,
            price=price.model_dump() if price is not None else None,
            max_output_tokens=agent.route.max_output_tokens,
        )
    return model_access(controls) if agent.needs_agent_dir else None


def agent_image(task: Task, agent: Agent, env: TrialEnv) -> str:
    """Sandbox A's image: the task's, or for an installed CLI its layer on the task's pinned
    image (``runner.agents.installed.layer``)."""
    image = image_of(task, env.controls)
    if isinstance(agent, Installed):
        return agent.image_on(env.pins.get(image) or image)
    return image


def _spec(
    job: Job,
    image: str,
    env: TrialEnv,
    lifetime: float,
    agent_dir: bool,
    io: bool = True,
    access: ModelAccess | None = None,
) -> SandboxSpec:
    """Sandbox A reaches the model through ``access`` (``agent_access``); sandbox B (verify)
    never does."""
    return SandboxSpec(
        image=image,
        image_id=env.pins.get(image),
        limits=limits_of(env.controls),
        lifetime_s=lifetime + SANDBOX_LIFETIME_MARGIN_S,
        labels={"run": job.run_id, "job": job.job_id},
        with_agent_dir=agent_dir,
        with_io=io,
        workspace_root_owned=not io,
        oci_runtime=env.controls.runtime.oci_runtime,
        model_access=access if io else None,
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
    if result.abstained or result.stop_reason == "budget_exhausted":  # the agent's own miss
        return
    if isinstance(task, AnswerTask):
        if result.answer_present and not result.answer_invalid:
            facts.passed, facts.metrics = score_answer(result.answer, task, agent_wall, env.metrics)
        return
    with telemetry.phase("verify"):
        _verify(job, task, env, fixture, facts.applied or b"", facts)


def _agent_phase(
    job: Job, task: Task, agent: Agent, env: TrialEnv, fixture: StagedFixture, facts: Facts
) -> float | None:
    """Sandbox A: the agent acts, everything it started is stopped, its patch is taken and
    screened. The agent's wall time, or None when the trial ends here (the reason in facts)."""
    controls = env.controls
    timeout_s = task_timeout(task, controls.runtime.timeout_s)
    forbidden = tuple(controls.tools.forbidden_paths)
    spec = _spec(
        job,
        agent_image(task, agent, env),
        env,
        timeout_s,
        agent.needs_agent_dir,
        access=agent_access(agent, controls),
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
                return _grade_now(job, task, env, fixture, sandbox)

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
        agent_wall = time.monotonic() - agent_t0
        if agent.runs_programs:
            stop_agent(sandbox)
        if not _agent_ended_well(facts.agent, timeout_s, facts):
            return None
        if isinstance(task, RepoTask) and not _take_and_screen(
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


def _take_and_screen(
    job: Job,
    task: RepoTask,
    env: TrialEnv,
    fixture: StagedFixture,
    sandbox: Sandbox,
    facts: Facts,
) -> bool:
    """The agent's patch and what of it the verify phase may apply; False (with the reason)
    when there is nothing to verify."""
    if not _take(sandbox, facts):
        return False
    if facts.patch_truncated:
        facts.reason = f"the patch is over the verify cap of {MAX_VERIFY_PATCH_BYTES} bytes"
        return False
    image = image_of(task, env.controls)
    screened = _screen(job, task, env, fixture, facts.patch, image, facts.image_digest)
    if screened is None:
        facts.reason = "the patch could not be read as git writes it"
        return False
    facts.applied = screened.patch
    facts.dropped = tuple(str(d) for d in screened.dropped)
    facts.tool_violation = screened.violation
    return True


def _screen(
    job: Job,
    task: RepoTask,
    env: TrialEnv,
    fixture: StagedFixture,
    patch: bytes,
    image: str,
    image_id: str,
) -> Screened | None:
    """The patch after the grading policy; None when it cannot be read (never applied)."""
    hidden = env.inputs.hidden(task) if task.hidden is not None else []
    probe = _spec(job, image, env, 60, False, io=False)
    ground = Ground(
        fixture_files=fixture.view.files,
        hidden_files=frozenset(m.path for m in hidden if not m.is_dir),
        module_names=module_names(env.sandboxes, probe, image_id),
        forbidden=tuple(env.controls.tools.forbidden_paths),
        patterns=tuple(env.controls.tools.grading_paths),
        declared=harness_paths(task),
    )
    try:
        return screen(patch, ground)
    except PatchError:
        return None


def _grade_now(
    job: Job, task: RepoTask, env: TrialEnv, fixture: StagedFixture, sandbox: Sandbox
) -> bool:
    """The hidden tests' verdict on the agent's changes so far, in a separate fresh sandbox."""
    probe = Facts()
    if not _take(sandbox, probe):
        return False
    screened = _screen(
        job, task, env, fixture, probe.patch, image_of(task, env.controls), sandbox.image_digest
    )
    if screened is None:
        return False
    _verify(job, task, env, fixture, screened.patch, probe)
    return probe.passed and not probe.timed_out


def _take(sandbox: Sandbox, facts: Facts) -> bool:
    """Take the agent's patch into ``facts``; False (with the reason) when the workspace
    the agent left cannot be diffed: that is the agent's doing, a miss, never an error."""
    patch, truncated, problem = take_patch(sandbox)
    facts.patch, facts.patch_truncated = patch, truncated
    if problem is not None:
        facts.reason = problem
        return False
    return True


def reverify(trial: Trial, task: RepoTask, env: TrialEnv) -> bool | None:
    """Run the hidden tests again on a recorded patch in a fresh sandbox; the new verdict.

    ``None`` when the record has no verdict to re-check (abstained, timed out,
    errored, or a patch too large to store whole, or one whose bytes do not match
    ``patch_sha256``).
    """
    if trial.outcome not in (Outcome.SUCCESS, Outcome.MISS) or trial.patch_truncated:
        return None
    patch = patch_of(trial)
    if trial.patch_sha256 and sha256_bytes(patch) != trial.patch_sha256:
        return None
    job = Job.of(trial)
    fixture = env.fixture(task)
    image = image_of(task, env.controls)
    image_id = trial.image_digest or image
    screened = _screen(job, task, env, fixture, patch, image, image_id)
    if screened is None:
        return False
    facts = Facts()
    _verify(job, task, env, fixture, screened.patch, facts)
    if facts.timed_out:
        return False
    return facts.passed


def _verify(
    job: Job, task: RepoTask, env: TrialEnv, fixture: StagedFixture, patch: bytes, facts: Facts
) -> None:
    """Phase B in a fresh sandbox (``runner.grading.verify``), its findings into ``facts``."""
    controls = env.controls
    settings = VerifySettings(
        timeout_s=controls.runtime.verify_timeout_s,
        output_cap=controls.runtime.caps.output_bytes,
        workspace_bytes=limits_of(controls).workspace_bytes,
    )
    spec = _spec(job, image_of(task, controls), env, settings.timeout_s, False, io=False)
    hidden = env.inputs.hidden(task)
    # The patched tree gets runtime.limits.workspace; what the harness writes, room beside it.
    room = sandbox_bytes(settings, fixture.view, hidden, patch)
    spec = replace(
        spec,
        limits=replace(spec.limits, workspace_bytes=room),
        staged_trees=staged_trees(fixture, (), baseline=False),
    )
    with env.sandboxes.open(spec) as sandbox:
        workspace = None if WORKSPACE in sandbox.prefilled else fixture.workspace_tar(())
        probe = _spec(job, image_of(task, controls), env, 60, False, io=False)
        plugins = image_facts(env.sandboxes, probe, sandbox.image_digest).pytest_plugins
        settings = replace(settings, plugins=plugins)
        try:
            found = verify(sandbox, task, fixture.view, workspace, hidden, patch, settings)
        except SandboxLost as lost:  # the code under test ended the sandbox: no pass
            why = f"the verify sandbox ended: {lost.reason}"
            found = VerifyOutcome(False, reason=why, oom_killed=lost.oom_killed)
    facts.tool_violation = facts.tool_violation or found.tampered
    facts.passed = found.passed
    facts.timed_out = found.timed_out
    facts.verify_exit_code = found.exit_code
    facts.verify_log = found.log
    facts.verify_log_truncated = found.log_truncated
    facts.verify_oom_killed = found.oom_killed
    if not found.passed:
        facts.reason = found.reason
