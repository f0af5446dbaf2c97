"""``execute_trial``: one job, from a fresh agent sandbox to a graded ``Trial`` record.

The same plain function runs under the local pool and under the Celery task.

Phase A (agent): a fresh sandbox; the fixture (minus forbidden paths) is copied
into ``/workspace``; a baseline commit is made in the root-only ``/baseline``;
the agent acts under the task's wall-clock limit (a command agent under
``guard.py``, which kills every other process of the agent's uid the moment the
agent's program exits); a sweep kills whatever is left; then the patch is what
``git diff`` writes on stdout against the baseline, byte for byte.

The patch is screened (``runner.grading_policy``): what would change how grading
runs is dropped and counted. Phase B (``runner.verify``) applies the rest in a
second fresh sandbox the agent never saw and runs the hidden tests.

Who is to blame: a failure of the engine, the network or deltarun is outcome
``error``. A failure caused by what the agent controls (its files, their names
and sizes, its answer, its processes) is a miss, an invalid completion or a
timeout, with the reason in the record. Both sandboxes are removed in
``finally``, on every path.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from runner.agents import AGENT_ENV, GUARD_FILE, PROMPT_FILE, Agent, AgentContext, AgentResult
from runner.archives import Entry, Member, build_tar, owned_tar
from runner.bounded_json import BoundsError, check_storable, sanitize
from runner.controls import Controls, parse_size
from runner.errors import DeltarunError, InfraError
from runner.gitpatch import PatchError
from runner.grading_policy import Ground, Screened, screen
from runner.hashing import sha256_bytes
from runner.image_facts import module_names
from runner.metrics import BUILTIN, Metric, score_answer
from runner.models import (
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
from runner.outcomes import classify
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
from runner.sandbox_scripts import source
from runner.verify import VerifyOutcome, VerifySettings, verify

# Patches up to this size are verified; the record stores at most caps.patch_bytes.
MAX_VERIFY_PATCH_BYTES = 64 << 20
SANDBOX_LIFETIME_MARGIN_S = 120.0
MAX_DROPPED_LISTED = 50
# A prompt up to this size travels in one environment string (Linux allows 128 KiB).
MAX_ENV_PROMPT_BYTES = 100 << 10
_GIT_ENV = {
    "GIT_DIR": f"{BASELINE_DIR}/git",
    "GIT_WORK_TREE": WORKSPACE,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "HOME": BASELINE_DIR,
    "PATH": "/usr/bin:/bin",
}
# Harness git: no hooks, no fsmonitor, no path protections (a file name git would
# refuse is the agent's business, never a harness failure), whatever the workspace holds.
GIT = (
    "git -c core.hooksPath=/dev/null -c core.fsmonitor=false -c core.protectNTFS=false "
    "-c core.protectHFS=false -c core.autocrlf=false -c core.safecrlf=false"
)
# $GIT_DIR/info/attributes outranks every .gitattributes: no filter, no conversion,
# no re-encoding, no binary switch the agent could set.
NEUTRAL_ATTRIBUTES = (
    "* !text !eol !crlf !ident !filter !diff !merge !working-tree-encoding !encoding "
    "!whitespace !export-subst !delta"
)


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
    patch: bytes = b""
    patch_truncated: bool = False
    applied: bytes | None = None  # the screened patch the verify phase applied
    dropped: tuple[str, ...] = ()
    tool_violation: bool = False
    passed: bool = False
    timed_out: bool = False
    verify_exit_code: int | None = None
    verify_log: str = ""
    verify_log_truncated: bool = False
    verify_oom_killed: bool = False
    image_digest: str = ""
    reason: str | None = None  # why the outcome is what it is, when the harness knows
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
    wall_s = time.monotonic() - t0
    try:
        return _record(job, task, env, facts, started_at, wall_s, retries)
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


def error_record(
    job: Job,
    task: Task,
    worker: str,
    error: str,
    started_at: datetime,
    wall_s: float,
    finished_at: datetime,
) -> Trial:
    """The smallest record of a job whose full record could not be built or read: a
    deltarun error naming the cause, so the job is neither lost nor counted as a miss."""
    return Trial(
        run_id=job.run_id,
        job_id=job.job_id,
        protocol_sha256=job.protocol_sha256,
        task_id=job.task_id,
        arm=job.arm,
        repeat=job.repeat,
        task_kind=task.kind,
        outcome=Outcome.ERROR,
        passed=False,
        timeout=False,
        tool_violation=False,
        abstained=False,
        wall_s=round(wall_s, 3),
        error=clean_text(f"deltarun could not record this trial: {error}")[:2000],
        grading=grading_of(task).value,
        worker=worker,
        started_at=started_at.isoformat(),
        finished_at=finished_at.isoformat(),
    )


def clean_text(text: str) -> str:
    """A string any JSON writer accepts: lone surrogates (undecodable bytes of a file
    name, say) become U+FFFD."""
    return text.encode("utf-8", "replace").decode("utf-8")


def stored_patch(data: bytes, cap: int) -> tuple[str, Literal["utf-8", "base64"]]:
    """(text, encoding) of the first ``cap`` bytes of a patch: the bytes themselves when
    they are UTF-8, else base64, so the record always holds exactly what git wrote."""
    kept = data[:cap]
    try:
        return kept.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(kept).decode("ascii"), "base64"


def patch_of(trial: Trial) -> bytes:
    """The stored patch bytes of a record (whole unless ``patch_truncated``)."""
    if trial.patch_encoding == "base64":
        return base64.b64decode(trial.patch)
    return trial.patch.encode("utf-8")


def _answer(result: AgentResult) -> tuple[Any, str | None]:
    """The answer as stored, or None with the reason it cannot be stored."""
    if not result.answer_present or result.answer_invalid:
        return None, None
    try:
        check_storable(result.answer)
    except BoundsError as exc:
        return None, f"the answer cannot be stored ({exc})"
    return result.answer, None


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
    answer, answer_problem = _answer(result)
    passed = facts.passed and answer_problem is None
    outcome = classify(
        kind=task.kind,
        infra_error=facts.error is not None,
        timed_out=facts.timed_out,
        abstained=result.abstained,
        passed=passed,
    )
    reason = facts.reason or answer_problem or result.reason
    caps = env.controls.runtime.caps
    text, encoding = stored_patch(facts.patch, caps.patch_bytes)
    transcript = None if result.transcript is None else sanitize(result.transcript)
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
        patch=text,
        patch_encoding=encoding,
        patch_sha256=sha256_bytes(facts.patch) if facts.patch else "",
        patch_truncated=facts.patch_truncated or len(facts.patch) > caps.patch_bytes,
        applied_sha256=sha256_bytes(facts.applied) if facts.applied else "",
        dropped=[clean_text(d) for d in facts.dropped[:MAX_DROPPED_LISTED]],
        reason=None if reason is None or outcome is Outcome.SUCCESS else clean_text(reason),
        grading=grading_of(task).value,
        answer=answer,
        verify_exit_code=facts.verify_exit_code,
        verify_log=facts.verify_log,
        verify_log_truncated=facts.verify_log_truncated,
        agent_log=clean_text(result.log[-caps.output_bytes :]),
        agent_log_truncated=result.log_truncated or len(result.log) > caps.output_bytes,
        oom_killed=result.oom_killed or facts.verify_oom_killed,
        agent_exit_code=result.exit_code,
        error=None if facts.error is None else clean_text(facts.error),
        stop_reason=result.stop_reason,
        route_mismatch=result.route_mismatch,
        transcript=transcript,
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
        workspace_root_owned=not io,
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
        _baseline(sandbox, prompt, guard=agent.runs_programs)
        hidden_test = None
        if isinstance(task, RepoTask) and grading_of(task) is not Grading.NONE:

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
        if agent.runs_programs:
            stop_agent(sandbox)
        facts.agent = result
        if result.error is not None:
            facts.error = result.error  # the endpoint failed: infrastructure, not the agent
            return
        if result.timed_out:
            facts.timed_out = True
            facts.reason = f"the agent ran past its limit of {timeout_s:g}s"
            return
        if result.guard_broken:
            facts.tool_violation = True
            facts.reason = "the agent ended deltarun's guard process"
            return
        if isinstance(task, RepoTask):
            if not _take(sandbox, facts):
                return
            if facts.patch_truncated:
                facts.reason = f"the patch is over the verify cap of {MAX_VERIFY_PATCH_BYTES} bytes"
                return
            screened = _screen(job, task, env, fixture, facts.patch, image, facts.image_digest)
            if screened is None:
                facts.reason = "the patch could not be read as git writes it"
                return
            facts.applied = screened.patch
            facts.dropped = tuple(str(d) for d in screened.dropped)
            facts.tool_violation = screened.violation

    if task.kind is TaskKind.NEGATIVE or result.abstained:
        return
    if isinstance(task, AnswerTask):
        if result.answer_present and not result.answer_invalid:
            facts.passed, _ = score_answer(result.answer, task, agent_wall, env.metrics)
        return
    if facts.patch_truncated:
        facts.reason = f"the patch is over the verify cap of {MAX_VERIFY_PATCH_BYTES} bytes"
        return
    _verify(job, task, env, fixture, facts.applied or b"", facts)


def _screen(
    job: Job,
    task: RepoTask,
    env: TrialEnv,
    fixture: list[Member],
    patch: bytes,
    image: str,
    image_id: str,
) -> Screened | None:
    """The patch after the grading policy; None when it cannot be read (never applied)."""
    hidden = env.inputs.hidden(task) if task.hidden is not None else []
    probe = _spec(job, image, env, 60, False, io=False)
    ground = Ground(
        fixture_files=frozenset(m.path for m in fixture if not m.is_dir),
        hidden_files=frozenset(m.path for m in hidden if not m.is_dir),
        module_names=module_names(env.sandboxes, probe, image_id),
        forbidden=tuple(env.controls.tools.forbidden_paths),
        patterns=tuple(env.controls.tools.grading_paths),
    )
    try:
        return screen(patch, ground)
    except PatchError:
        return None


def _grade_now(
    job: Job, task: RepoTask, env: TrialEnv, fixture: list[Member], sandbox: Sandbox
) -> bool:
    """The hidden tests' verdict on the agent's changes so far, in a separate fresh sandbox."""
    probe = _Facts()
    if not _take(sandbox, probe):
        return False
    screened = _screen(
        job, task, env, fixture, probe.patch, image_of(task, env.controls), sandbox.image_digest
    )
    if screened is None:
        return False
    _verify(job, task, env, fixture, screened.patch, probe)
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


def _baseline(sandbox: Sandbox, prompt: str, guard: bool) -> None:
    """Commit the workspace as given into the root-only /baseline, whose attributes file
    switches off every workspace attribute, and write the prompt (and, for agents that
    run programs, the guard) into /io, root-owned and read-only to the agent.

    One exec when it can be: a prompt that fits one environment string travels in
    the environment of this root process, which has ended before the agent starts.
    """
    script = (
        f"{GIT} init -q && mkdir -p {BASELINE_DIR}/git/info && "
        f"echo '{NEUTRAL_ATTRIBUTES}' > {BASELINE_DIR}/git/info/attributes && "
        f"{GIT} add -A && {GIT} -c user.name=deltarun -c user.email=deltarun@localhost "
        "commit -q --no-verify --allow-empty -m baseline"
    )
    data = prompt.encode("utf-8")
    inline = len(data) <= MAX_ENV_PROMPT_BYTES
    files = [] if inline else [Entry(PROMPT_FILE.rsplit("/", 1)[1], data, 0, 0o444)]
    if guard:
        files.append(Entry(GUARD_FILE.rsplit("/", 1)[1], source("guard.py"), 0, 0o444))
    if files:
        sandbox.put_archive(IO_DIR, owned_tar(files))
    if inline:
        script += f' && printf %s "$DELTARUN_PROMPT" > {PROMPT_FILE} && chmod 0444 {PROMPT_FILE}'
    _root(sandbox, script, env={"DELTARUN_PROMPT": prompt} if inline else None)


def stop_agent(sandbox: Sandbox) -> None:
    """Kill every process of the agent's uid: nothing the agent started runs on while the
    harness takes its patch (``guard.py sweep``, a fresh process of that uid)."""
    sandbox.run(
        ExecRequest(
            argv=["python3", "-I", "-S", GUARD_FILE, "sweep"],
            env={"PATH": AGENT_ENV["PATH"], "LANG": "C.UTF-8"},
            timeout_s=30,
            output_cap=4096,
        )
    )


def _make_readable(sandbox: Sandbox) -> None:
    """Make the agent's files readable to the harness (the agent may ``chmod 000`` them)."""
    sandbox.run(
        ExecRequest(
            argv=["sh", "-c", f"chmod -R u+rwX,go+rX {WORKSPACE} 2>/dev/null; true"],
            env=AGENT_ENV,
            timeout_s=60,
        )
    )


def _take(sandbox: Sandbox, facts: _Facts) -> bool:
    """Take the agent's patch into ``facts``; False (with the reason) when the workspace
    the agent left cannot be diffed: that is the agent's doing, a miss, never an error."""
    patch, truncated, problem = take_patch(sandbox)
    facts.patch, facts.patch_truncated = patch, truncated
    if problem is not None:
        facts.reason = problem
        return False
    return True


def take_patch(sandbox: Sandbox) -> tuple[bytes, bool, str | None]:
    """(patch, truncated, problem): ``git diff``'s stdout against the baseline, exactly.

    Only stdout is the patch (git's warnings, which name agent-chosen paths, go to
    stderr). Files git refuses to index (names it reserves, such as ``.GIT/x``)
    are left out of the patch rather than losing the rest. A git that fails on the
    workspace the agent left gives a problem instead of a patch; an engine failure
    raises ``SandboxError`` (infrastructure).
    """
    request = ExecRequest(
        argv=[
            "sh",
            "-c",
            # A path git refuses to index (".GIT/x") is left out, the rest is taken.
            f"{GIT} add -A --ignore-errors >/dev/null; {GIT} diff --cached --binary "
            "--no-color --no-ext-diff --no-textconv --no-renames HEAD",
        ],
        user=ROOT_USER,
        env=_GIT_ENV,
        timeout_s=120,
        output_cap=MAX_VERIFY_PATCH_BYTES,
        separate_stderr=True,
    )
    result = sandbox.run(request)
    if _failed(result.exit_code, result.timed_out, result.output_truncated):
        _make_readable(sandbox)
        result = sandbox.run(request)
    if result.output_truncated:
        return result.output, True, None
    if _failed(result.exit_code, result.timed_out, False):
        why = result.stderr[-400:].decode("utf-8", "replace").strip() or "no message"
        if result.timed_out:
            why = "it took longer than 120s"
        return b"", False, f"git could not diff the workspace the agent left: {why}"
    return result.output, False, None


def _failed(exit_code: int | None, timed_out: bool, truncated: bool) -> bool:
    return not truncated and (exit_code != 0 or timed_out)


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
    job = Job(
        job_id=trial.job_id,
        run_id=trial.run_id,
        protocol_sha256=trial.protocol_sha256,
        task_id=trial.task_id,
        arm=trial.arm,
        repeat=trial.repeat,
    )
    fixture = env.inputs.fixture(task)
    image = image_of(task, env.controls)
    image_id = trial.image_digest or image
    screened = _screen(job, task, env, fixture, patch, image, image_id)
    if screened is None:
        return False
    facts = _Facts()
    _verify(job, task, env, fixture, screened.patch, facts)
    if facts.timed_out:
        return False
    return facts.passed


def _verify(
    job: Job, task: RepoTask, env: TrialEnv, fixture: list[Member], patch: bytes, facts: _Facts
) -> None:
    """Phase B in a fresh sandbox (``runner.verify``), its findings into ``facts``."""
    controls = env.controls
    settings = VerifySettings(
        timeout_s=controls.runtime.verify_timeout_s,
        output_cap=controls.runtime.caps.output_bytes,
        workspace_bytes=limits_of(controls).workspace_bytes,
    )
    spec = _spec(job, image_of(task, controls), env, settings.timeout_s, False, io=False)
    hidden = env.inputs.hidden(task)
    with env.sandboxes.open(spec) as sandbox:
        found: VerifyOutcome = verify(sandbox, task, fixture, hidden, patch, settings)
    facts.passed = found.passed
    facts.timed_out = found.timed_out
    facts.verify_exit_code = found.exit_code
    facts.verify_log = found.log
    facts.verify_log_truncated = found.log_truncated
    facts.verify_oom_killed = found.oom_killed
    if not found.passed:
        facts.reason = found.reason
