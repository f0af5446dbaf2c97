"""Numbers as people write them."""


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, ... 11th, 12th, 13th, ... 21st."""
    if 10 <= n % 100 <= 20:
        suffix = "th"
    else:
        suffix = {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def parse_int(text: str) -> int:
    """An integer written with optional thousands separators: "12,345" is 12345."""
    return int(text.replace(",", "").replace("_", "").strip())
