"""An OpenAI-compatible chat-completions client: one POST, retried as infrastructure.

Adapter at the edge (sockets). Rate limits (429), server errors (5xx) and lost
connections are retried with exponential backoff (``Retry-After`` honoured),
within the attempt budget and the trial's deadline; they are never agent
retries. What cannot succeed by retrying (a refused key, a bad request, a
reply that is not a chat completion) fails at once. Every failure becomes an
``EndpointError`` whose message never contains the API key.
"""

from __future__ import annotations

import http.client
import json
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from runner.errors import EndpointError

MAX_RESPONSE_BYTES = 32 << 20
BACKOFF_BASE_S = 0.5
BACKOFF_MAX_S = 30.0
_RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class Completion:
    """The parts of a chat completion the tool loop uses."""

    model: str | None
    message: dict[str, Any]
    prompt_tokens: int
    completion_tokens: int
    attempts: int


class DeadlineReached(Exception):
    """The trial's wall-clock limit ran out while waiting on the endpoint."""


class ChatEndpoint:
    """POSTs to ``<base_url>/chat/completions``; ``sleep`` is injectable for tests."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        *,
        max_attempts: int,
        request_timeout_s: float,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        parts = urlsplit(base_url)
        self.scheme = parts.scheme
        self.host = parts.hostname or ""
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.path = parts.path.rstrip("/") + "/chat/completions"
        self.where = f"{parts.scheme}://{parts.netloc}{self.path}"
        self.api_key = api_key
        self.max_attempts = max_attempts
        self.request_timeout_s = request_timeout_s
        self.sleep = sleep

    def complete(self, body: dict[str, Any], deadline: float) -> Completion:
        """One chat completion; raises ``EndpointError`` or ``DeadlineReached``."""
        payload = json.dumps(body).encode("utf-8")
        last = ""
        for attempt in range(1, self.max_attempts + 1):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise DeadlineReached()
            try:
                status, headers, data = self._post(payload, min(remaining, self.request_timeout_s))
            except TimeoutError as exc:
                if deadline - time.monotonic() <= 0.05:
                    raise DeadlineReached() from exc
                last = f"no reply within {self.request_timeout_s:g}s"
                wait = self._backoff(attempt, None)
            except (OSError, http.client.HTTPException) as exc:
                last = f"unreachable ({self._redact(str(exc) or type(exc).__name__)})"
                wait = self._backoff(attempt, None)
            else:
                if status == 200:
                    return self._parse(data, attempt)
                excerpt = self._redact(data[:300].decode("utf-8", "replace")).strip()
                if status in (401, 403):
                    raise EndpointError(
                        f"endpoint {self.where} refused the API key (HTTP {status}); check the "
                        "variable named by route.api_key_env"
                    )
                if status not in _RETRY_STATUS:
                    raise EndpointError(f"endpoint {self.where} answered HTTP {status}: {excerpt}")
                last = f"HTTP {status}: {excerpt}"
                wait = self._backoff(attempt, headers.get("retry-after"))
            if attempt == self.max_attempts:
                break
            if time.monotonic() + wait >= deadline:
                raise DeadlineReached()
            self.sleep(wait)
        raise EndpointError(
            f"endpoint {self.where} failed {self.max_attempts} attempts; last: {last}"
        )

    def _post(self, payload: bytes, timeout: float) -> tuple[int, dict[str, str], bytes]:
        connection: http.client.HTTPConnection
        if self.scheme == "https":
            connection = http.client.HTTPSConnection(
                self.host, self.port, timeout=timeout, context=ssl.create_default_context()
            )
        else:
            connection = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        try:
            connection.request("POST", self.path, body=payload, headers=headers)
            response = connection.getresponse()
            data = response.read(MAX_RESPONSE_BYTES + 1)
            if len(data) > MAX_RESPONSE_BYTES:
                raise EndpointError(f"endpoint {self.where} sent over {MAX_RESPONSE_BYTES} bytes")
            return response.status, {k.lower(): v for k, v in response.getheaders()}, data
        finally:
            connection.close()

    def _backoff(self, attempt: int, retry_after: str | None) -> float:
        if retry_after is not None:
            try:
                return min(BACKOFF_MAX_S, max(0.0, float(retry_after)))
            except ValueError:
                pass
        return float(min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** (attempt - 1)))

    def _parse(self, data: bytes, attempts: int) -> Completion:
        try:
            reply = json.loads(data.decode("utf-8"))
            choice = reply["choices"][0]
            message = choice["message"]
            if not isinstance(message, dict):
                raise TypeError("message is not an object")
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, IndexError, TypeError) as exc:
            raise EndpointError(
                f"endpoint {self.where} sent a reply that is not a chat completion ({exc})"
            ) from exc
        usage = reply.get("usage") or {}
        model = reply.get("model")
        return Completion(
            model=model if isinstance(model, str) else None,
            message=message,
            prompt_tokens=_count(usage.get("prompt_tokens")),
            completion_tokens=_count(usage.get("completion_tokens")),
            attempts=attempts,
        )

    def _redact(self, text: str) -> str:
        return text.replace(self.api_key, "***") if self.api_key else text


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value >= 0 else 0
