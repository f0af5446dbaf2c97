"""Currency metadata: display symbol and number of minor-unit digits (ISO 4217)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict


@dataclass(frozen=True)
class Currency:
    """An ISO 4217 currency as far as formatting is concerned."""

    code: str
    symbol: str
    decimals: int


CURRENCIES: Dict[str, Currency] = {
    c.code: c
    for c in (
        Currency("USD", "$", 2),
        Currency("EUR", "€", 2),
        Currency("GBP", "£", 2),
        Currency("CHF", "CHF ", 2),
        Currency("JPY", "¥", 0),
        Currency("KWD", "KD ", 3),
    )
}


def get_currency(code: str) -> Currency:
    """Look up a currency by its ISO code (case-insensitive)."""
    try:
        return CURRENCIES[code.upper()]
    except KeyError:
        raise ValueError(f"unknown currency code {code!r}") from None
