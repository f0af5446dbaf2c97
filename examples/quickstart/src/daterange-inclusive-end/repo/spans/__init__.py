"""spans: inclusive calendar date ranges."""

from spans.daterange import DateRange
from spans.workdays import business_days

__all__ = ["DateRange", "business_days"]
