"""Splitting an amount into equal shares."""

from __future__ import annotations

from decimal import Decimal
from typing import List

from ledgerkit.money import Number, round_cents, to_decimal


def split_amount(total: Number, parts: int) -> List[Decimal]:
    """Split *total* into *parts* shares of whole cents that add up to it."""
    if parts < 1:
        raise ValueError("parts must be at least 1")
    share = round_cents(to_decimal(total) / parts)
    return [share] * parts
