"""weeknum: ISO 8601 week labels."""

from weeknum.ranges import weeks_between
from weeknum.weeks import parse_label, week_label, week_start, weeks_in_year

__all__ = ["parse_label", "week_label", "week_start", "weeks_between", "weeks_in_year"]
