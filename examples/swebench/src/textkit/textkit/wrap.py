"""Greedy line wrapping."""


def wrap(text: str, width: int) -> list[str]:
    """Lines of at most ``width`` characters, words kept whole."""
    lines: list[str] = []
    line = ""
    for word in text.split():
        candidate = f"{line} {word}" if line else word
        if len(candidate) <= width:
            line = candidate
        else:
            if line:
                lines.append(line)
            line = word
    if line:
        lines.append(line)
    return lines
