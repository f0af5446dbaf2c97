"""The tool names the controls accept are exactly the tools the policy defines."""

from __future__ import annotations

from runner.agents.loop.tool_policy import SCHEMAS
from runner.config.runtime import TOOL_NAMES


def test_the_controls_and_the_policy_name_the_same_tools_in_order() -> None:
    assert tuple(SCHEMAS) == TOOL_NAMES
