"""Public holidays on which no invoices fall due (Munich office).

Finance sends the calendar for each year; add its dates here.
"""

from __future__ import annotations

from datetime import date
from typing import FrozenSet

HOLIDAYS: FrozenSet[date] = frozenset(
    {
        date(2026, 1, 1),
        date(2026, 1, 6),
        date(2026, 4, 3),
        date(2026, 4, 6),
        date(2026, 5, 1),
        date(2026, 10, 3),
        date(2026, 12, 25),
        date(2026, 12, 26),
    }
)
