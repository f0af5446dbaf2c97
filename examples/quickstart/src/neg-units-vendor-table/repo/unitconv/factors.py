"""Conversion factors to SI base units (metre, kilogram, cubic metre).

Each entry maps a unit name to ``(dimension, factor)`` where
``value_in_si = value * factor``.
"""

from __future__ import annotations

from typing import Dict, Tuple

FACTORS: Dict[str, Tuple[str, float]] = {
    # length -> metre
    "mm": ("length", 0.001),
    "cm": ("length", 0.01),
    "m": ("length", 1.0),
    "km": ("length", 1000.0),
    "in": ("length", 0.0254),
    "ft": ("length", 0.3048),
    "yd": ("length", 0.9144),
    "mi": ("length", 1609.344),
    # mass -> kilogram
    "g": ("mass", 0.001),
    "kg": ("mass", 1.0),
    "oz": ("mass", 0.028349523125),
    "lb": ("mass", 0.45359237),
    # volume -> cubic metre
    "ml": ("volume", 1e-6),
    "l": ("volume", 0.001),
    "fl_oz": ("volume", 2.95735295625e-5),
    "gal": ("volume", 0.003785411784),
}
