"""Conversion between integers and Roman numerals.

Only the standard subtractive notation is produced: 4 is ``IV`` and
1994 is ``MCMXCIV``. The range is 1..3999 because larger numbers need an
overline that plain text cannot express.
"""

from __future__ import annotations

MAX_VALUE = 3999

_NUMERALS = [
    (1000, "M"),
    (900, "CM"),
    (500, "D"),
    (400, "CD"),
    (100, "C"),
    (90, "XC"),
    (50, "L"),
    (40, "XL"),
    (10, "X"),
    (9, "IX"),
    (5, "V"),
    (4, "IV"),
    (1, "I"),
]

_SYMBOL_VALUES = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}


def to_roman(number: int) -> str:
    """Return the Roman numeral for *number* (1..3999)."""
    if isinstance(number, bool) or not isinstance(number, int):
        raise TypeError(f"expected an int, got {type(number).__name__}")
    if not 1 <= number <= MAX_VALUE:
        raise ValueError(f"Roman numerals cover 1..{MAX_VALUE}, got {number}")
    parts = []
    for value, symbol in _NUMERALS:
        count, number = divmod(number, value)
        parts.append(symbol * count)
    return "".join(parts)


def from_roman(text: str) -> int:
    """Return the integer value of the Roman numeral *text*.

    Case-insensitive; surrounding whitespace is ignored. Raises
    ``ValueError`` if *text* is not a valid numeral.
    """
    numeral = text.strip().upper()
    if not numeral:
        raise ValueError("empty Roman numeral")
    total = 0
    for index, symbol in enumerate(numeral):
        value = _SYMBOL_VALUES.get(symbol)
        if value is None:
            raise ValueError(f"invalid character {symbol!r} in Roman numeral {text!r}")
        following = numeral[index + 1] if index + 1 < len(numeral) else None
        if following is not None and _SYMBOL_VALUES.get(following, 0) > value:
            total -= value
        else:
            total += value
    return total


def is_roman(text: str) -> bool:
    """Return True if *text* is a valid Roman numeral."""
    try:
        from_roman(text)
    except ValueError:
        return False
    return True
