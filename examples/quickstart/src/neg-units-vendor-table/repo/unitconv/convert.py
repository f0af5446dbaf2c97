"""Unit conversion through SI base units."""

from __future__ import annotations

from unitconv.factors import FACTORS


class IncompatibleUnits(ValueError):
    """The two units measure different dimensions (e.g. mass and length)."""


def convert(value: float, from_unit: str, to_unit: str) -> float:
    """Convert *value* from *from_unit* to *to_unit*.

    The result is rounded to 12 significant digits so that exact
    conversions (12 in -> 30.48 cm) do not show float noise.
    """
    from_dim, from_factor = FACTORS[from_unit]
    to_dim, to_factor = FACTORS[to_unit]
    if from_dim != to_dim:
        raise IncompatibleUnits(f"cannot convert {from_dim} ({from_unit}) to {to_dim} ({to_unit})")
    result = value * from_factor / to_factor
    return float(f"{result:.12g}")
