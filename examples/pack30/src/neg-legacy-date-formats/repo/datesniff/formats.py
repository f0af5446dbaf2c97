"""The accepted formats, tried in order."""

FORMATS = (
    "%Y-%m-%d",  # ISO 8601
    "%d.%m.%Y",  # German
)
