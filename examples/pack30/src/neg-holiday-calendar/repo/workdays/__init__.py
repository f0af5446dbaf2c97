"""workdays: business-day arithmetic."""

from workdays.business import add_business_days, is_business_day
from workdays.holidays import HOLIDAYS

__all__ = ["HOLIDAYS", "add_business_days", "is_business_day"]
