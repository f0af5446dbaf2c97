"""The workers' scaling rule, simulated: KEDA's ScaledObject plus the HPA it drives.

Pure and offline: ``rule_from_scaled_object`` reads the rule from the ScaledObject in
``keda.yaml`` (as a parsed dict) and ``simulate`` plays a time series of trigger
values (queue length, trials in flight) through it, one step per polling interval,
giving the replica count after each step. What is modelled, and how:

- Each trigger's value: KEDA's ``redis`` scaler reads LLEN of the queue's list, the
  ``prometheus`` scaler the query's value; the series gives both.
- With ``advanced.scalingModifiers`` the triggers are combined by the formula (only
  sums of trigger names, ``a + b``, are understood) into one metric; desired =
  ceil(metric / target) (``AverageValue``). Without it, desired = the max over
  triggers of ceil(value / that trigger's target): KEDA hands the HPA one metric per
  trigger and the HPA takes the largest proposal.
- HPA: a step whose usage ratio is within 10 % of 1 changes nothing (its default
  tolerance); the proposal is clamped to [max(1, minReplicaCount), maxReplicaCount];
  scale-down is stabilised (the highest proposal of the last
  ``scaleDown.stabilizationWindowSeconds`` wins), scale-up likewise with its window;
  the policies cap the change per period (``Pods``: value pods, ``Percent``: value %
  of the replicas a period ago), ``selectPolicy`` ``Max`` allowing the largest change.
- KEDA: from 0 replicas, an active metric (above ``activationTarget``, or any
  trigger above its activation value) scales to 1 and the HPA takes over at the next
  step; with nothing active for ``cooldownPeriod`` seconds it scales to
  ``minReplicaCount`` (0 here). Until then the HPA keeps at least one replica.

Not modelled: the metric's scrape and query delays, pods' start-up time, and which
pod the ReplicaSet removes (a busy one drains: ``worker.yaml``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

TOLERANCE = 0.1  # the HPA's default --horizontal-pod-autoscaler-tolerance


@dataclass(frozen=True)
class Policy:
    """One HPA scaling policy: at most ``value`` pods (``Pods``) or percent of the replicas
    a period ago (``Percent``) per ``period_s``."""

    kind: str
    value: int
    period_s: int


@dataclass(frozen=True)
class Direction:
    """The HPA's behaviour in one direction: stabilisation window and policies."""

    window_s: int
    policies: tuple[Policy, ...]
    select: str = "Max"


@dataclass(frozen=True)
class Trigger:
    """A trigger's name, its target per replica and its activation value."""

    name: str
    target: float
    activation: float = 0.0


@dataclass(frozen=True)
class Rule:
    """The scaling rule of one ScaledObject (see the module docstring)."""

    min_replicas: int
    max_replicas: int
    polling_s: int
    cooldown_s: int
    triggers: tuple[Trigger, ...]
    up: Direction
    down: Direction
    # scalingModifiers: the trigger names summed, the target and activation target of
    # the sum; None when KEDA takes the max over triggers.
    formula: tuple[str, ...] | None = None
    formula_target: float = 1.0
    formula_activation: float = 0.0


@dataclass
class _State:
    replicas: int
    last_active: float | None = None
    proposals: list[tuple[float, int]] = field(default_factory=list)
    history: list[tuple[float, int]] = field(default_factory=list)


_TRIGGER_TARGETS = {
    "redis": ("listLength", "activationListLength"),
    "prometheus": ("threshold", "activationThreshold"),
}


def rule_from_scaled_object(doc: Mapping[str, Any]) -> Rule:
    """The rule a ScaledObject (``keda.sh/v1alpha1``, parsed) configures, with KEDA's and
    the HPA's defaults for what it leaves out."""
    spec = doc["spec"]
    triggers = []
    for trigger in spec["triggers"]:
        target_key, activation_key = _TRIGGER_TARGETS[trigger["type"]]
        meta = trigger["metadata"]
        triggers.append(
            Trigger(
                name=trigger.get("name", trigger["type"]),
                target=float(meta[target_key]),
                activation=float(meta.get(activation_key, 0)),
            )
        )
    advanced = spec.get("advanced") or {}
    behavior = (advanced.get("horizontalPodAutoscalerConfig") or {}).get("behavior") or {}
    modifiers = advanced.get("scalingModifiers")
    formula = None
    formula_target = formula_activation = 0.0
    if modifiers:
        formula = parse_sum(modifiers["formula"], [t.name for t in triggers])
        if modifiers.get("metricType", "AverageValue") != "AverageValue":
            raise ValueError("only scalingModifiers.metricType AverageValue is simulated")
        formula_target = float(modifiers["target"])
        formula_activation = float(modifiers.get("activationTarget", 0))
    return Rule(
        min_replicas=int(spec.get("minReplicaCount", 0)),
        max_replicas=int(spec.get("maxReplicaCount", 100)),
        polling_s=int(spec.get("pollingInterval", 30)),
        cooldown_s=int(spec.get("cooldownPeriod", 300)),
        triggers=tuple(triggers),
        up=_direction(
            behavior.get("scaleUp"), 0, (Policy("Percent", 100, 15), Policy("Pods", 4, 15))
        ),
        down=_direction(behavior.get("scaleDown"), 300, (Policy("Percent", 100, 15),)),
        formula=formula,
        formula_target=formula_target,
        formula_activation=formula_activation,
    )


def parse_sum(formula: str, names: Sequence[str]) -> tuple[str, ...]:
    """The trigger names of ``a + b + ...``; ``ValueError`` for any other formula or an
    unknown name."""
    terms = tuple(term.strip() for term in formula.split("+"))
    for term in terms:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", term) or term not in names:
            raise ValueError(f"formula {formula!r}: {term!r} is not a trigger name")
    return terms


def _direction(
    given: Mapping[str, Any] | None, window_s: int, policies: tuple[Policy, ...]
) -> Direction:
    if not given:
        return Direction(window_s, policies)
    return Direction(
        window_s=int(given.get("stabilizationWindowSeconds", window_s)),
        policies=tuple(
            Policy(p["type"], int(p["value"]), int(p["periodSeconds"]))
            for p in given.get("policies", [])
        )
        or policies,
        select=str(given.get("selectPolicy", "Max")),
    )


def proposal(rule: Rule, values: Mapping[str, float]) -> tuple[int, bool, float]:
    """(replicas the metric asks for, whether it is active, the HPA's usage per replica
    target) for one sample of trigger ``values``, before clamping and stabilisation."""
    if rule.formula is not None:
        metric = sum(values[name] for name in rule.formula)
        wanted = math.ceil(metric / rule.formula_target)
        return wanted, metric > rule.formula_activation, metric / rule.formula_target
    wanted = max(math.ceil(values[t.name] / t.target) for t in rule.triggers)
    active = any(values[t.name] > t.activation for t in rule.triggers)
    usage = max(values[t.name] / t.target for t in rule.triggers)
    return wanted, active, usage


def simulate(
    rule: Rule, series: Sequence[Mapping[str, float]], start_replicas: int = 0
) -> list[int]:
    """Replicas after each step; ``series[i]`` holds every trigger's value at time
    ``i * rule.polling_s``."""
    state = _State(start_replicas)
    out: list[int] = []
    for index, values in enumerate(series):
        now = float(index * rule.polling_s)
        wanted, active, usage = proposal(rule, values)
        if active:
            state.last_active = now
        if state.replicas == 0:
            if active:
                state.replicas = max(1, rule.min_replicas)
        elif not active and (
            state.last_active is None or now - state.last_active >= rule.cooldown_s
        ):
            state.replicas = rule.min_replicas
            state.proposals.clear()
        else:
            state.replicas = _hpa_step(rule, state, now, wanted, usage)
        state.history.append((now, state.replicas))
        out.append(state.replicas)
    return out


def _hpa_step(rule: Rule, state: _State, now: float, wanted: int, usage: float) -> int:
    current = state.replicas
    if abs(usage / current - 1.0) <= TOLERANCE:
        wanted = current
    floor = max(1, rule.min_replicas)
    wanted = min(max(wanted, floor), rule.max_replicas)
    state.proposals.append((now, wanted))
    window = max(rule.up.window_s, rule.down.window_s)
    state.proposals = [(t, p) for t, p in state.proposals if now - t <= window]
    down_recent = [p for t, p in state.proposals if now - t <= rule.down.window_s]
    up_recent = [p for t, p in state.proposals if now - t <= rule.up.window_s]
    if wanted > current:
        target = min(up_recent)
        if target <= current:
            return current
        return min(target, _limit(rule.up, state, now, current, up=True))
    if wanted < current:
        target = max(down_recent)
        if target >= current:
            return current
        return max(target, _limit(rule.down, state, now, current, up=False))
    return current


def _limit(direction: Direction, state: _State, now: float, current: int, up: bool) -> int:
    """The furthest the policies let the replicas move from ``current`` in one step."""
    limits = []
    for policy in direction.policies:
        base = _replicas_at(state, now - policy.period_s, current)
        if policy.kind == "Pods":
            change = policy.value
        elif policy.kind == "Percent":
            change = (
                math.ceil(base * policy.value / 100)
                if up
                else math.floor(base * policy.value / 100)
            )
        else:
            raise ValueError(f"unknown policy type {policy.kind!r}")
        limits.append(base + change if up else base - change)
    if not limits:
        return current
    widest = max(limits) if up else min(limits)
    narrowest = min(limits) if up else max(limits)
    return widest if direction.select == "Max" else narrowest


def _replicas_at(state: _State, when: float, default: int) -> int:
    """The replica count at ``when`` (``default`` before the history starts)."""
    found = default
    for t, replicas in state.history:
        if t > when:
            break
        found = replicas
    return found
