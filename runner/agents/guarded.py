"""A program run as the agent under deltarun's guard, and what the gateway saw of it.

The guard (``runner/sandbox_scripts/guard.py``) runs the program in ``/workspace`` as the
agent's uid and, the moment it exits, kills every other process of that uid before the
exit can be seen; it alone writes to stderr, one report line. Used by ``command`` agents
and installed CLIs. The engine can lose that line; the guard's copy of it is then read
(``runner.sandbox.guard_run``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from runner.agents.interface import GUARD_FILE, AgentContext, AgentResult
from runner.config.arms import Route
from runner.sandbox.base import IO_DIR, ExecRequest, ModelCall
from runner.sandbox.guard_run import LOST_LINE, guard_argv, run_guarded_exec


def run_guarded(ctx: AgentContext, argv: Sequence[str], env: Mapping[str, str]) -> AgentResult:
    """Run ``argv`` under the guard within the trial's limit. A guard that failed is an
    error; one that never reported (killed by the agent) is a broken guard."""
    request = ExecRequest(
        argv=guard_argv(GUARD_FILE, argv),
        env=env,
        timeout_s=ctx.timeout_s,
        output_cap=ctx.output_cap,
        separate_stderr=True,
        stderr_cap=4096,
        untrusted=True,
    )
    guarded = run_guarded_exec(ctx.sandbox, request, IO_DIR)
    result, report = guarded.result, guarded.report
    log = result.output.decode("utf-8", "replace")
    if guarded.from_copy:
        log += f"\ndeltarun: {LOST_LINE}\n"
    exit_code = result.exit_code
    if report is not None and report.group(2) == b"exit":
        exit_code = int(report.group(3))
    if report is not None and report.group(2) == b"error":
        failure = report.group(3).decode("ascii", "replace")
        return AgentResult(
            exit_code=exit_code, log=log, error=f"deltarun's guard failed: {failure}"
        )
    broken = report is None and not result.timed_out and not result.oom_killed
    return AgentResult(
        exit_code=exit_code,
        timed_out=result.timed_out,
        oom_killed=result.oom_killed,
        log=log,
        log_truncated=result.output_truncated,
        guard_broken=broken,
    )


# Flags of the gateway's ledger (runner.gateway) worth a line at the end of the agent log.
FLAG_NOTES = {
    "estimated": "answers the gateway could not read whole, counted at their request's maximum",
    "key_reflected": "answers that carried the gateway's key back (removed before the sandbox)",
    "lost": "requests in flight when the gateway stopped, counted at their maximum",
}
OVERFLOW = ("models_overflow",)  # more model names than the gateway keeps: not all checked


def model_usage(base: AgentResult, calls: list[ModelCall], route: Route) -> AgentResult:
    """Tokens summed from the gateway's ledger, the route lock on every model name of every
    answered request, and a line in the log for each kind of answer the gateway flagged."""
    tokens = replace(
        base,
        prompt_tokens=sum(c.prompt_tokens for c in calls),
        completion_tokens=sum(c.completion_tokens for c in calls),
        cache_read_tokens=sum(c.cache_read_tokens for c in calls),
        cache_write_tokens=sum(c.cache_write_tokens for c in calls),
    )
    notes = "".join(
        f"\ndeltarun: model gateway: {n} {FLAG_NOTES[flag]}\n"
        for flag in FLAG_NOTES
        if (n := sum(flag in c.flags for c in calls))
    )
    if notes:
        tokens = replace(tokens, log=tokens.log + notes)
    answered = sorted({m for c in calls for m in (*c.models, c.model) if m is not None})
    error = next((e for model in answered if (e := route.mismatch(model))), None)
    if error is None and any(flag in c.flags for c in calls for flag in OVERFLOW):
        error = "route_mismatch: an answer named more models than the gateway keeps"
    if error is None:
        return tokens
    return replace(tokens, route_mismatch=True, stop_reason="route_mismatch", error=error)
