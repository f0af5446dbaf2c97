"""Cache settings."""

DEFAULT_TTL = 300.0  # seconds
