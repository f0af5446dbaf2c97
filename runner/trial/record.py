"""A trial's record: built from what the phases found, and always one the ledger reads back.

Pure. Everything an agent or a model put into the phases (answers, transcripts,
logs, file names that are not UTF-8, the patch's bytes) is bounded or made
storable here, so the writer never writes what the reader would refuse
(``runner.bounded_json``); the patch is kept byte for byte (base64 when it is not
UTF-8) with ``patch_sha256`` over exactly those bytes.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal

from runner.agents.interface import AgentResult
from runner.bounded_json import BoundsError, check_storable, sanitize
from runner.config.runtime import Caps
from runner.grading.outcomes import classify
from runner.hashing import sha256_bytes
from runner.records import Job, Outcome, Task, TaskKind, Trial, grading_of
from runner.sandbox.base import SandboxLost

MAX_DROPPED_LISTED = 50


@dataclass
class Facts:
    """What the phases of one trial found, gathered for its record."""

    agent: AgentResult | None = None
    patch: bytes = b""
    patch_truncated: bool = False
    applied: bytes | None = None  # the screened patch the verify phase applied
    dropped: tuple[str, ...] = ()
    tool_violation: bool = False
    passed: bool = False
    metrics: dict[str, bool] | None = None  # an answer task's metrics, each one's result
    timed_out: bool = False
    verify_exit_code: int | None = None
    verify_log: str = ""
    verify_log_truncated: bool = False
    verify_oom_killed: bool = False
    image_digest: str = ""
    limits: dict[str, Any] | None = None  # what the trial ran under (runner.trial.limits)
    reason: str | None = None  # why the outcome is what it is, when the harness knows
    error: str | None = None
    setup_note: str = ""  # the install step failed in the agent's sandbox (leads agent_log)

    def agent_sandbox_lost(self, lost: SandboxLost) -> None:
        """The agent's sandbox ended by its own state (``runner.sandbox.blame``): the agent's
        miss, with the reason. Ended under the agent's own command, that command ended with
        the sandbox (137 when the sandbox was OOM-killed)."""
        self.reason = f"the agent's sandbox ended: {lost.reason}"
        if self.agent is None:
            self.agent = AgentResult(exit_code=lost.exit_code, oom_killed=lost.oom_killed)
        elif lost.oom_killed:
            self.agent = replace(self.agent, oom_killed=True)


def bare_record(
    job: Job,
    kind: TaskKind,
    outcome: Outcome,
    worker: str,
    started_at: datetime,
    finished_at: datetime,
    **fields: Any,
) -> Trial:
    """A record of ``job`` with nothing but its outcome (and ``fields``): for a job whose full
    record cannot be built, and for bodies that run no trial (benchmarks, tests)."""
    return Trial(
        run_id=job.run_id,
        job_id=job.job_id,
        protocol_sha256=job.protocol_sha256,
        task_id=job.task_id,
        arm=job.arm,
        repeat=job.repeat,
        task_kind=kind,
        outcome=outcome,
        passed=outcome is Outcome.SUCCESS,
        timeout=outcome is Outcome.TIMEOUT,
        tool_violation=fields.pop("tool_violation", False),
        abstained=outcome in (Outcome.ABSTAIN_OK, Outcome.FALSE_ABSTAIN),
        wall_s=fields.pop("wall_s", 0.0),
        worker=worker,
        started_at=started_at.isoformat(),
        finished_at=finished_at.isoformat(),
        **fields,
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
    return bare_record(
        job,
        task.kind,
        Outcome.ERROR,
        worker,
        started_at,
        finished_at,
        wall_s=round(wall_s, 3),
        error=clean_text(f"deltarun could not record this trial: {error}")[:2000],
        grading=grading_of(task).value,
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


def _outcome(
    task: Task, facts: Facts, result: AgentResult, answer_problem: str | None
) -> tuple[Outcome, str | None]:
    """The trial's outcome (``classify``) and the reason to record with it; an answer
    that cannot be stored is no pass."""
    outcome = classify(
        kind=task.kind,
        infra_error=facts.error is not None,
        timed_out=facts.timed_out,
        abstained=result.abstained,
        passed=facts.passed and answer_problem is None,
        changed=bool(facts.patch) or result.answer_present,
    )
    reason = facts.reason or answer_problem or result.reason
    if (
        task.kind is TaskKind.NEGATIVE
        and result.abstained
        and outcome is Outcome.INVALID_COMPLETION
    ):
        reason = reason or "abstained but left a change (a patch or an answer)"
    return outcome, reason


def build_record(
    job: Job,
    task: Task,
    facts: Facts,
    *,
    caps: Caps,
    worker: str,
    started_at: datetime,
    finished_at: datetime,
    wall_s: float,
    retries: int,
) -> Trial:
    """The record of one job from what its phases found.

    Longer than the house's ~60 lines on purpose: one line per field of the record
    (``runner.records.Trial``), in the contract's order."""
    result = facts.agent or AgentResult()
    answer, answer_problem = _answer(result)
    outcome, reason = _outcome(task, facts, result, answer_problem)
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
        cache_read_tokens=result.cache_read_tokens,
        cache_write_tokens=result.cache_write_tokens,
        cost_usd=result.cost_usd,
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
        metrics=facts.metrics if answer_problem is None else None,
        verify_exit_code=facts.verify_exit_code,
        verify_log=facts.verify_log,
        verify_log_truncated=facts.verify_log_truncated,
        agent_log=clean_text((facts.setup_note + result.log)[-caps.output_bytes :]),
        agent_log_truncated=result.log_truncated
        or len(facts.setup_note + result.log) > caps.output_bytes,
        oom_killed=result.oom_killed or facts.verify_oom_killed,
        agent_exit_code=result.exit_code,
        error=None if facts.error is None else clean_text(facts.error),
        stop_reason=result.stop_reason,
        route_mismatch=result.route_mismatch,
        transcript=transcript,
        transcript_truncated=result.transcript_truncated,
        session=None if result.session is None else base64.b64encode(result.session).decode(),
        worker=worker,
        image_digest=facts.image_digest,
        limits=facts.limits,
        attempt=retries + 1,
        started_at=started_at.isoformat(),
        finished_at=finished_at.isoformat(),
    )
