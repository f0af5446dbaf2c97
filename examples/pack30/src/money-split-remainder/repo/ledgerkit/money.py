"""Amounts in a currency with cents."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from typing import Union

Number = Union[Decimal, int, str]

CENT = Decimal("0.01")


def to_decimal(amount: Number) -> Decimal:
    """*amount* as a Decimal; floats are refused (they cannot hold most cent values)."""
    if isinstance(amount, float):
        raise TypeError("use Decimal, int or str for money, not float")
    return amount if isinstance(amount, Decimal) else Decimal(amount)


def round_cents(amount: Number) -> Decimal:
    """Round to whole cents, half away from zero (commercial rounding)."""
    return to_decimal(amount).quantize(CENT, rounding=ROUND_HALF_UP)
