"""fxconv: currency conversion."""

from fxconv.convert import convert
from fxconv.rates import RATES

__all__ = ["RATES", "convert"]
