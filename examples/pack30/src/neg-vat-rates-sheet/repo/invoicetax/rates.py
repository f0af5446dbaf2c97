"""VAT rates by country and category (as fractions)."""

from __future__ import annotations

from decimal import Decimal
from typing import Dict

RATES: Dict[str, Dict[str, Decimal]] = {
    "DE": {"standard": Decimal("0.19"), "reduced": Decimal("0.07")},
    "FR": {"standard": Decimal("0.20"), "reduced": Decimal("0.055")},
    "AT": {"standard": Decimal("0.20"), "reduced": Decimal("0.10")},
    "NL": {"standard": Decimal("0.21"), "reduced": Decimal("0.09")},
}


def rate_for(country: str, category: str = "standard") -> Decimal:
    try:
        return RATES[country.upper()][category]
    except KeyError:
        raise ValueError(f"no {category} VAT rate for {country!r}") from None
