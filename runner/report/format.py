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


def tokens_per_pass(value: float | None) -> str:
    """Tokens per pass for a person: ``n/a (no pass)`` without a pass, ``not metered`` when
    the arm's trials reported no token usage at all (a patch or scripted arm, or an agent
    that does not report it), else the whole number."""
    if value is None:
        return "n/a (no pass)"
    return "not metered" if value == 0 else f"{value:.0f}"
