"""moneyfmt: format monetary amounts for invoices and receipts."""

from moneyfmt.currency import CURRENCIES, Currency, get_currency
from moneyfmt.format import format_money

__all__ = ["CURRENCIES", "Currency", "format_money", "get_currency"]
