"""invoicetax: VAT for invoice lines."""

from invoicetax.rates import RATES, rate_for
from invoicetax.vat import compute_vat

__all__ = ["RATES", "compute_vat", "rate_for"]
