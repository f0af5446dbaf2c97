"""Reference rates: units of each currency per 1 EUR."""

from __future__ import annotations

from decimal import Decimal
from typing import Dict

RATES: Dict[str, Decimal] = {
    "EUR": Decimal("1"),
    "USD": Decimal("1.08"),
    "GBP": Decimal("0.85"),
    "CHF": Decimal("0.96"),
}
