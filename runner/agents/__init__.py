"""Agents: what acts in sandbox A, one module per kind, built by ``make_agent``.

- ``scripted``: the frozen control (``noop`` or ``abstain``).
- ``replay`` (``type: patch``): replays ``<task_id>.diff`` / ``.abstain`` /
  ``.answer.json`` from a directory (a recorded agent, or the gold solution).
- ``command``: a program from the arm's directory, run under deltarun's guard.
- ``model`` (``type: openai``): deltarun drives a model through a tool loop.

The interface (``Agent``, ``AgentContext``, ``AgentResult``) is in ``base``, the
factory (``make_agent``) in ``factory``. This file imports nothing, so the pure
tool policy (``model.policy``), which the controls' models use, loads without the
agents that depend on those models.
"""
