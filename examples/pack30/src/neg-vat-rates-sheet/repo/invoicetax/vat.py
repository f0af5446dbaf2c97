"""VAT amounts."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

from invoicetax.rates import rate_for

CENT = Decimal("0.01")


def compute_vat(net: Decimal, country: str, category: str = "standard") -> Decimal:
    """The VAT on *net*, rounded half-up to cents."""
    return (net * rate_for(country, category)).quantize(CENT, rounding=ROUND_HALF_UP)
