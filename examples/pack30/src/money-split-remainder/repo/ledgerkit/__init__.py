"""ledgerkit: Decimal money helpers."""

from ledgerkit.money import CENT, round_cents, to_decimal
from ledgerkit.split import split_amount

__all__ = ["CENT", "round_cents", "split_amount", "to_decimal"]
