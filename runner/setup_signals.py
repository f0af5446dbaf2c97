"""What a record says about the setup rather than the agent: the few signals. Pure.

Read from a record's ``reason`` and ``agent_log`` once, when it is recorded or
scored, so that ``deltarun validate`` (``runner.grading.validation``) and the report's
"Setup warnings" (``runner.run.setup_warnings``) read them the same way.
"""

from __future__ import annotations

NO_TEST_RAN = "no-test-ran"
NO_OUTPUT = "no-recorded-output"
# What a patch arm's agent logs when its directory has nothing for the task.
NO_OUTPUT_LOG = "no recorded output for this task"
# What the harness says when the runner ran no test (runner.fixtures.declared, verify).
NOT_COLLECTED = (
    "no test ran",
    "did not run",
    "pytest exit status 4",
    "pytest exit status 5",
    "(exit 4) before pytest reported",
    "(exit 5) before pytest reported",
)


def not_collected(reason: str | None) -> bool:
    return reason is not None and any(s in reason for s in NOT_COLLECTED)


def signal_of(reason: str | None, agent_log: str) -> str | None:
    """``NO_TEST_RAN``, ``NO_OUTPUT`` or None for one record."""
    if not_collected(reason):
        return NO_TEST_RAN
    if agent_log.strip() == NO_OUTPUT_LOG:
        return NO_OUTPUT
    return None
