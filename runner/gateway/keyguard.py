"""The real key never goes back toward the sandbox: not in an answer's headers, not in its
body, streamed or not.

An upstream page that reflects request headers (an error page, a debug endpoint) would hand
the key the gateway added to the agent, and from there to the patch, the transcript and the
records. The gateway reads every answer whole before it sends it on, so a key split over the
network's chunks is whole here: each literal occurrence, in a header or the body, is
replaced by ``REPLACEMENT``. A key the body carries in another form that a client decodes
back (JSON ``\\u`` escapes, or split over a stream's deltas: ``wire.read_answer`` finds
those by joining each field's strings) cannot be cut out of the bytes, so the answer is
withheld whole (``WITHHELD``, a 502 in the error shape of the other refusals). Either way
the request's ledger line is flagged ``key_reflected``.
"""

from __future__ import annotations

REPLACEMENT = b"[deltarun: key removed]"
WITHHELD = "the upstream's answer carried the gateway's key and was withheld"


def scrub_body(data: bytes | bytearray, secret: str | None) -> tuple[bytes | bytearray, bool]:
    """``data`` with every literal occurrence of ``secret`` replaced; whether there was one."""
    if not secret:
        return data, False
    needle = secret.encode()
    if needle not in data:
        return data, False
    return data.replace(needle, REPLACEMENT), True


def scrub_headers(
    headers: list[tuple[str, str]], secret: str | None
) -> tuple[list[tuple[str, str]], bool]:
    """The headers with ``secret`` replaced in each value, and any header whose name
    holds it dropped; whether there was one."""
    if not secret:
        return headers, False
    kept: list[tuple[str, str]] = []
    found = False
    replacement = REPLACEMENT.decode()
    for name, value in headers:
        if secret in name:
            found = True
            continue
        if secret in value:
            found = True
            value = value.replace(secret, replacement)
        kept.append((name, value))
    return kept, found
