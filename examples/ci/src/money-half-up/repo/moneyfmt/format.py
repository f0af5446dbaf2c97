"""Formatting of monetary amounts."""

from __future__ import annotations

from decimal import Decimal
from typing import Union

from moneyfmt.currency import get_currency

Amount = Union[Decimal, int, str]


def format_money(
    amount: Amount,
    currency: str = "USD",
    thousands: str = ",",
    decimal_point: str = ".",
) -> str:
    """Format *amount* with the currency's symbol, minor unit and digit grouping.

    *amount* is rounded half-up (commercial rounding, as printed on invoices)
    to the number of decimals of *currency*: two for USD, none for JPY.
    """
    cur = get_currency(currency)
    value = round(float(amount), cur.decimals)
    text = f"{value:,.{cur.decimals}f}"
    integer, _, fraction = text.partition(".")
    body = integer.replace(",", thousands)
    if fraction:
        body += decimal_point + fraction
    return f"{cur.symbol}{body}"
