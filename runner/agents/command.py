"""``command``: a program from the arm's directory, run under deltarun's guard.

The directory is copied read-only to ``/opt/agent``; ``argv`` runs in
``/workspace`` as the agent user, as the child of ``guard.py``, which kills every
other process of the agent's uid the moment the program exits (see
docs/verdicts-and-sandbox.md). Under ``network: model-only`` the program reaches the model through
the trial's gateway, whose log gives the token usage and the route lock.
"""

from __future__ import annotations

from runner.agents.guarded import model_usage, run_guarded
from runner.agents.interface import AGENT_ENV, AgentContext, AgentResult, collect_outputs
from runner.config.arms import Route, Toggles
from runner.sandbox.base import AGENT_DIR
from runner.trees.archives import Member, build_tar


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
        base = run_guarded(ctx, self.argv, env)
        if base.error is not None:
            return base
        if base_url is not None and self.route is not None:
            base = model_usage(base, ctx.sandbox.model_calls(), self.route)
        if base.timed_out:
            return base
        return collect_outputs(ctx.sandbox, base, ctx.output_cap)
