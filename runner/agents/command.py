"""``command``: a program from the arm's directory, run under deltarun's guard.

The directory is copied read-only to ``/opt/agent``; ``argv`` runs in
``/workspace`` as the agent user, as the child of ``guard.py``, which kills every
other process of the agent's uid the moment the program exits (see
docs/verdicts-and-sandbox.md). Under ``network: model-only`` the program reaches the model through
the trial's gateway, whose log gives the token usage and the route lock.
"""

from __future__ import annotations

import re
from dataclasses import replace

from runner.agents.base import (
    AGENT_ENV,
    GUARD_FILE,
    AgentContext,
    AgentResult,
    collect_outputs,
)
from runner.config.model import Route, Toggles
from runner.fixtures.archives import Member, build_tar
from runner.sandbox.base import AGENT_DIR, ExecRequest, ModelCall

GUARD_REPORT = re.compile(rb"deltarun-guard: mode=(\w+) (exit|signal|terminated|error)=(\w+)")


class Command:
    """A program from the arm's directory, run as the agent user under the task's limit.

    With ``route`` (``network: model-only``) the program reaches the model at
    ``$DELTARUN_MODEL_BASE_URL`` through the trial's gateway; its requests'
    token usage is summed and every reply must name the pinned model.
    """

    needs_agent_dir = True
    runs_programs = True

    def __init__(
        self,
        members: list[Member],
        argv: list[str],
        toggles: Toggles | None = None,
        route: Route | None = None,
    ) -> None:
        self.argv = argv
        self.toggles = toggles
        self.route = route
        self.env = {**AGENT_ENV, **(toggles.env if toggles else {})}
        # Root-owned and read-only: the agent can run its program, not change it.
        self._tar = build_tar(members, uid=0, gid=0, writable=False)

    def run(self, ctx: AgentContext) -> AgentResult:
        ctx.sandbox.put_archive(AGENT_DIR, self._tar)
        env = dict(self.env)
        base_url = ctx.sandbox.model_base_url
        if base_url is not None and self.route is not None:
            # The gateway adds the real key; SDKs that insist on one get a placeholder.
            env |= {
                "DELTARUN_MODEL_BASE_URL": base_url,
                "DELTARUN_MODEL": self.route.model,
                "OPENAI_BASE_URL": base_url,
                "OPENAI_API_KEY": "sk-deltarun-gateway",
            }
        # Under the guard: when the program exits, every other process of the agent's
        # uid is killed before the exit can be seen; the guard alone writes to stderr.
        guarded = ["python3", "-I", "-S", GUARD_FILE, "run", "--", *self.argv]
        result = ctx.sandbox.run(
            ExecRequest(
                argv=guarded,
                env=env,
                timeout_s=ctx.timeout_s,
                output_cap=ctx.output_cap,
                separate_stderr=True,
                stderr_cap=4096,
            )
        )
        log = result.output.decode("utf-8", "replace")
        report = GUARD_REPORT.search(result.stderr)
        exit_code = result.exit_code
        if report is not None and report.group(2) == b"exit":
            exit_code = int(report.group(3))
        if report is not None and report.group(2) == b"error":
            failure = report.group(3).decode("ascii", "replace")
            return AgentResult(
                exit_code=exit_code, log=log, error=f"deltarun's guard failed: {failure}"
            )
        broken = report is None and not result.timed_out and not result.oom_killed
        base = AgentResult(
            exit_code=exit_code,
            timed_out=result.timed_out,
            oom_killed=result.oom_killed,
            log=log,
            log_truncated=result.output_truncated,
            guard_broken=broken,
        )
        if base_url is not None and self.route is not None:
            base = _model_usage(base, ctx.sandbox.model_calls(), self.route)
        if result.timed_out:
            return base
        return collect_outputs(ctx.sandbox, base, ctx.output_cap)


def _model_usage(base: AgentResult, calls: list[ModelCall], route: Route) -> AgentResult:
    """Tokens summed from the gateway's log, and the route lock on every answered request."""
    tokens = replace(
        base,
        prompt_tokens=sum(c.prompt_tokens for c in calls),
        completion_tokens=sum(c.completion_tokens for c in calls),
    )
    answered = sorted({c.model for c in calls if c.model is not None})
    error = next((e for model in answered if (e := route.mismatch(model))), None)
    if error is None:
        return tokens
    return replace(tokens, route_mismatch=True, stop_reason="route_mismatch", error=error)
