"""textkit: small text helpers (the project of deltarun's SWE-bench-format example)."""

__version__ = "1.0"
