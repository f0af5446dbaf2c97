"""URL slugs."""

import re


def slugify(text: str, sep: str = "-") -> str:
    """Lowercase ``text``, keep letters and digits, join the words with ``sep``."""
    words = re.split(r"[^a-z0-9]+", text.lower())
    return sep.join(word for word in words if word)
