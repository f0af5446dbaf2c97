"""Conversion."""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal
from typing import Mapping, Optional

from fxconv.rates import RATES


def convert(
    amount: Decimal, source: str, target: str, rates: Optional[Mapping[str, Decimal]] = None
) -> Decimal:
    """*amount* in *source* as *target*, rounded to cents (banker's rounding)."""
    table = RATES if rates is None else rates
    try:
        value = amount / table[source] * table[target]
    except KeyError as exc:
        raise ValueError(f"no rate for {exc.args[0]}") from None
    return value.quantize(Decimal("0.01"), rounding=ROUND_HALF_EVEN)
