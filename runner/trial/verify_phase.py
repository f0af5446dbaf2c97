"""Phase B and what leads to it: the agent's patch taken and screened by the grading policy,
then applied in a second fresh sandbox the agent never saw, where the hidden tests run
(``runner.grading.verify``); also ``grade_now`` (an agent asking mid-run) and ``reverify``
(a recorded patch checked again)."""

from __future__ import annotations

from dataclasses import replace

from runner.gitpatch import PatchError
from runner.grading.image_facts import image_facts, module_names
from runner.grading.patch_policy import Ground, Screened, screen
from runner.grading.runners import harness_paths
from runner.grading.verify import VerifyOutcome, VerifySettings, sandbox_bytes, verify
from runner.hashing import sha256_bytes
from runner.records import (
    Job,
    Outcome,
    RepoTask,
    Trial,
)
from runner.sandbox.base import (
    WORKSPACE,
    Sandbox,
    SandboxLost,
)
from runner.trees.staging import StagedFixture
from runner.trial.env import TrialEnv
from runner.trial.record import Facts, patch_of
from runner.trial.sandbox_specs import image_of, limits_of, sandbox_spec
from runner.trial.workspace import (
    MAX_VERIFY_PATCH_BYTES,
    staged_trees,
    take_patch,
)


def take_and_screen(
    job: Job,
    task: RepoTask,
    env: TrialEnv,
    fixture: StagedFixture,
    sandbox: Sandbox,
    facts: Facts,
) -> bool:
    """The agent's patch and what of it the verify phase may apply; False (with the reason)
    when there is nothing to verify."""
    if not take(sandbox, facts):
        return False
    if facts.patch_truncated:
        facts.reason = f"the patch is over the verify cap of {MAX_VERIFY_PATCH_BYTES} bytes"
        return False
    image = image_of(task, env.controls)
    screened = screen_patch(job, task, env, fixture, facts.patch, image, facts.image_digest)
    if screened is None:
        facts.reason = "the patch could not be read as git writes it"
        return False
    facts.applied = screened.patch
    facts.dropped = tuple(str(d) for d in screened.dropped)
    facts.tool_violation = screened.violation
    return True


def screen_patch(
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
    probe = sandbox_spec(job, image, env, 60, False, io=False)
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


def grade_now(
    job: Job, task: RepoTask, env: TrialEnv, fixture: StagedFixture, sandbox: Sandbox
) -> bool:
    """The hidden tests' verdict on the agent's changes so far, in a separate fresh sandbox."""
    probe = Facts()
    if not take(sandbox, probe):
        return False
    screened = screen_patch(
        job, task, env, fixture, probe.patch, image_of(task, env.controls), sandbox.image_digest
    )
    if screened is None:
        return False
    verify_patch(job, task, env, fixture, screened.patch, probe)
    return probe.passed and not probe.timed_out


def take(sandbox: Sandbox, facts: Facts) -> bool:
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
    screened = screen_patch(job, task, env, fixture, patch, image, image_id)
    if screened is None:
        return False
    facts = Facts()
    verify_patch(job, task, env, fixture, screened.patch, facts)
    if facts.timed_out:
        return False
    return facts.passed


def verify_patch(
    job: Job, task: RepoTask, env: TrialEnv, fixture: StagedFixture, patch: bytes, facts: Facts
) -> None:
    """Phase B in a fresh sandbox (``runner.grading.verify``), its findings into ``facts``."""
    controls = env.controls
    settings = VerifySettings(
        timeout_s=controls.runtime.verify_timeout_s,
        output_cap=controls.runtime.caps.output_bytes,
        workspace_bytes=limits_of(controls).workspace_bytes,
    )
    spec = sandbox_spec(job, image_of(task, controls), env, settings.timeout_s, False, io=False)
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
        probe = sandbox_spec(job, image_of(task, controls), env, 60, False, io=False)
        known = image_facts(env.sandboxes, probe, sandbox.image_digest)
        settings = replace(
            settings,
            plugins=known.pytest_plugins,
            bytecode=known.bytecode,
            install_bytecode=known.install_bytecode,
        )
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
