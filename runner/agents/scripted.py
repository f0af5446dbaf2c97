"""``scripted``: the frozen control; ``noop`` changes nothing, ``abstain`` abstains."""

from __future__ import annotations

from runner.agents.interface import AgentContext, AgentResult
from runner.config.arms import Toggles


class Scripted:
    """The frozen control: does nothing, or abstains."""

    needs_agent_dir = False
    runs_programs = False
    toggles: Toggles | None = None

    def __init__(self, action: str) -> None:
        self.action = action

    def run(self, ctx: AgentContext) -> AgentResult:
        if self.action == "abstain":
            return AgentResult(abstain_reason="scripted abstention")
        return AgentResult()
