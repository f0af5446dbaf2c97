"""billdates: month arithmetic for subscription billing."""

from billdates.months import add_months, days_in_month, month_end
from billdates.schedule import billing_dates, next_billing_date

__all__ = ["add_months", "billing_dates", "days_in_month", "month_end", "next_billing_date"]
