"""Sites and their standard UTC offsets (minutes)."""

from __future__ import annotations

from typing import Dict

SITES: Dict[str, int] = {
    "MUC": 60,
    "NYC": -300,
    "SIN": 480,
}
