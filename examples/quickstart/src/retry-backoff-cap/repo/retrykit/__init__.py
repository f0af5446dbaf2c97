"""retrykit: retry flaky calls with exponential backoff."""

from retrykit.backoff import Backoff
from retrykit.retry import RetryError, retry

__all__ = ["Backoff", "RetryError", "retry"]
