"""What stops a run with installed agents before anything is built or written: one line per
problem naming the arm and the field, exit 2 (``UsageError``). Pure."""

from __future__ import annotations

from runner.agents.installed.catalogue import KINDS, kind_of
from runner.bounded_input import excerpt
from runner.config.arms import Arm, InstalledAgent
from runner.config.controls import Controls
from runner.errors import UsageError


def check_installed(controls: Controls, source: str) -> None:
    """Raise ``UsageError`` with the first problem of the installed arms, if any."""
    problems = [p for index, arm in enumerate(controls.arms) for p in _arm(controls, index, arm)]
    problems += _run_budget(controls)
    if problems:
        raise UsageError(f"{source}: {problems[0]}")


def _arm(controls: Controls, index: int, arm: Arm) -> list[str]:
    agent = arm.agent
    if not isinstance(agent, InstalledAgent):
        return []
    at = f"arms[{index}] ({arm.name})"
    kind = kind_of(agent.name)
    if kind is None:
        choose = ", ".join(sorted(KINDS))
        return [f"{at}.agent.name: {agent.name!r} is not in the catalogue; choose from {choose}"]
    found = []
    if controls.runtime.network != "model-only":
        found.append(f"{at}.agent: an installed agent needs runtime.network: model-only")
    route = controls.route_for(agent)
    if route is None:
        found.append(f"{at}.agent.route: no route; add route: {{base_url, model}} here or on top")
    for key, value in agent.settings.items():
        if key not in kind.settings:
            known = ", ".join(sorted(kind.settings)) or "none"
            found.append(f"{at}.agent.settings.{key}: {kind.name} has no such setting ({known})")
        elif not _setting_ok(kind.setting_choices.get(key), value):
            choices = kind.setting_choices.get(key)
            want = f"one of {', '.join(choices)}" if choices else "a whole number of at least 1"
            found.append(f"{at}.agent.settings.{key}: {excerpt(str(value))} is not {want}")
    for target in arm.toggles.on_files if arm.toggles else {}:
        if not _inside(target, kind.toggle_targets):
            found.append(
                f"{at}.toggles.on_files.{target}: not one of {kind.name}'s extension points "
                f"under ~/{kind.config_dir}: {', '.join(kind.toggle_targets)}"
            )
    if route is not None:
        found += _prices_and_budget(controls, at, route.model, route.max_output_tokens)
    return found


def _setting_ok(choices: tuple[str, ...] | None, value: object) -> bool:
    """A word from ``choices``, or without them a whole number of at least 1 (not a bool)."""
    if choices:
        return isinstance(value, str) and value in choices
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 1_000_000


def _inside(target: str, allowed: tuple[str, ...]) -> bool:
    parts = target.strip("/").split("/")
    if not target or target.startswith("/") or ".." in parts or "" in parts:
        return False
    return any(parts[: len(a.split("/"))] == a.split("/") for a in allowed)


def _prices_and_budget(controls: Controls, at: str, model: str, max_output: int) -> list[str]:
    found = []
    budget = controls.budget
    wants_dollars = budget is not None and (budget.trial_usd or budget.run_usd)
    if (controls.prices or wants_dollars) and model not in controls.prices:
        found.append(
            f"{at}: prices has no entry for model {model!r}; add prices.{model} with input, "
            "output, cache_read and cache_write (dollars per million tokens)"
        )
    if budget is not None and budget.trial_tokens is not None and budget.trial_tokens < max_output:
        found.append(
            f"{at}: budget.trial_tokens ({budget.trial_tokens}) is below one request's maximum "
            f"output ({max_output}, route.max_output_tokens); raise it or lower the maximum"
        )
    return found


def _run_budget(controls: Controls) -> list[str]:
    budget = controls.budget
    if budget and budget.run_usd and budget.trial_usd and budget.run_usd < budget.trial_usd:
        return [
            f"budget.run_usd ({budget.run_usd}) is below budget.trial_usd ({budget.trial_usd}): "
            "not one trial could finish; raise it"
        ]
    return []
