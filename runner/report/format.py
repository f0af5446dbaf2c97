"""How the report writes numbers for a person (markdown and HTML share these). Pure."""

from __future__ import annotations


def pct(value: float | None) -> str:
    """A rate as a percentage with one decimal, or ``n/a``."""
    return "n/a" if value is None else f"{100 * value:.1f}%"


def signed_pp(value: float | None) -> str:
    """A difference of rates in signed percentage points, or ``n/a``."""
    return "n/a" if value is None else f"{100 * value:+.1f} pp"


def num(value: float | None, fmt: str = ".2f") -> str:
    """A number in ``fmt``, or ``n/a``."""
    return "n/a" if value is None else format(value, fmt)


def tokens_per_pass(value: float | None, metered: bool = True) -> str:
    """Tokens per pass for a person: ``not metered`` when the arm's trials reported no token
    usage at all (a patch or scripted arm, or an agent that does not report it), ``n/a (no
    pass)`` without a pass, else the whole number."""
    if not metered:
        return "not metered"
    return "n/a (no pass)" if value is None else f"{value:.0f}"


_METHODS = {"newcombe-paired": "Newcombe paired score", "t": "t over per-task means"}
REFUSAL_NOT_MEASURED = "refusal slice: not measured (the run has no negative-control task)"


def method_name(ci_method: object) -> str:
    """How an interval was made, for a person (``ci_method`` of the report)."""
    return _METHODS.get(str(ci_method), "method not recorded")


def detectable(mde: float | None) -> str:
    """The smallest true delta the run could detect (80% power, two-sided 5%)."""
    if mde is None:
        return "too few tasks to detect any delta at 80% power"
    return f"detectable at 80% power: ±{100 * mde:.1f} pp"


def cost_line(
    candidate_tokens: float | None,
    control_tokens: float | None,
    candidate_wall: float | None,
    control_wall: float | None,
    metered: tuple[bool, bool] = (True, True),  # (candidate, control) reported any tokens
) -> str:
    """The cost line of the headline: the candidate's beside the control's."""
    cand, ctrl = (
        tokens_per_pass(candidate_tokens, metered[0]),
        tokens_per_pass(control_tokens, metered[1]),
    )
    return (
        f"cost: {cand} vs {ctrl} "
        f"tokens per pass, {num(candidate_wall, '.1f')} s vs {num(control_wall, '.1f')} s "
        "wall per task (candidate vs control)"
    )
