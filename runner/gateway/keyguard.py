"""The real key never goes back toward the sandbox: not in an answer's headers, not in its
body, streamed or not, plainly or in a form a client or a script decodes back.

An upstream page that reflects request headers (an error page, a debug endpoint, a redirect
that carries them in its URL) would hand the key the gateway added to the agent, and from
there to the patch, the transcript and the records. The gateway reads every answer whole
(and decoded: upstream.py undoes a gzip or deflate content encoding) before it sends it on,
so a key split over the network's chunks is whole here.

    * Each literal occurrence is replaced by ``REPLACEMENT`` in a header, and in the body
      by as many bytes of it (padded with ``*``), in place.
    * The key in another form is looked for in the raw bytes of the body and of each header,
      whatever the document around it (so also in an answer too big to decode): every
      character of the key, or of its hex or base64 (standard or URL-safe, at any of the
      three alignments: the key inside a longer encoded text such as ``Bearer <key>``), may
      be written plainly or as a JSON ``\\u`` escape (escaped again any number of times), a
      percent escape (``%73``, ``%2573``) or an HTML character reference (``&#115;``,
      ``&#x73;``), in UTF-8 or (its NUL bytes dropped) UTF-16 or UTF-32. Letters match
      in either case: a server that title-cases a reflected header's name (Go's does) or
      upper-cases a message leaves too little to guess.
    * Split over a stream's deltas (``wire.read_answer`` joins each field's strings, per
      part of the answer: content block, choice, output item).

A body carrying the key in a form other than the literal one cannot be cut, so the answer is
withheld whole (``WITHHELD``, a 502 in the error shape of the other refusals); a header
carrying it so is dropped. Either way the request's ledger line is flagged ``key_reflected``.
"""

from __future__ import annotations

import base64
import re

REPLACEMENT = b"[deltarun: key removed]"
WITHHELD = "the upstream's answer carried the gateway's key and was withheld"
MIN_FORM_CHARS = 12  # an encoded form shorter than this (a very short key) is not looked for


class KeyGuard:
    """The forms of one key, and the search of answers for them."""

    def __init__(self, secret: str | None) -> None:
        self.secret = secret or None
        self.forms: re.Pattern[bytes] | None = None
        if self.secret is not None:
            # Matched against the text lowered (faster than a regex ignoring case).
            forms = dict.fromkeys(form.lower() for form in _forms(self.secret))
            self.forms = re.compile(b"|".join(_pattern(form) for form in forms))

    def scrub_body(self, data: bytes | bytearray) -> tuple[bytes | bytearray, bool, bool]:
        """``data`` with the literal key masked (in place: a body of 32 MiB is not held
        twice); whether it held the literal key, and whether it holds the key in another
        form (then it must be withheld)."""
        if self.secret is None or self.forms is None:
            return data, False, False
        needle = self.secret.encode()
        literal = needle in data
        if literal:
            data = data if isinstance(data, bytearray) else bytearray(data)
            mask = _mask(len(needle))
            start = data.find(needle)
            while start >= 0:
                data[start : start + len(needle)] = mask
                start = data.find(needle, start + len(needle))
        lowered = data.lower()
        if b"\0" in lowered:  # UTF-16 or UTF-32 text: its ASCII characters, side by side
            lowered = lowered.replace(b"\0", b"")
        return data, literal, self.forms.search(lowered) is not None

    def scrub_headers(self, headers: list[tuple[str, str]]) -> tuple[list[tuple[str, str]], bool]:
        """The headers with the literal key replaced in each value, and any header whose
        name holds the key, or whose value holds it in another form, dropped; whether any
        held it."""
        if self.secret is None or self.forms is None:
            return headers, False
        kept: list[tuple[str, str]] = []
        found = False
        replacement = REPLACEMENT.decode()
        for name, value in headers:
            if self.secret in value:
                found = True
                value = value.replace(self.secret, replacement)
            encoded = (name + ":" + value).encode("latin-1", "replace")
            if self.forms.search(encoded.lower()) is not None:
                found = True
                continue
            kept.append((name, value))
        return kept, found


def _mask(length: int) -> bytes:
    """``REPLACEMENT`` cut or padded with ``*`` to ``length`` bytes."""
    return (REPLACEMENT + b"*" * length)[:length]


def _forms(secret: str) -> list[bytes]:
    """The key's bytes, their hex, and the base64 text that stands for them alone at each
    alignment, in both alphabets."""
    raw = secret.encode()
    forms = [raw]
    extra = [raw.hex().encode()]
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        for offset in range(3):
            text = encode(b"\0" * offset + raw)
            start = (offset * 8 + 5) // 6  # the first character made of key bits alone
            stop = (offset + len(raw)) * 8 // 6  # past the last one
            extra.append(text[start:stop])
    forms += [form for form in extra if len(form) >= MIN_FORM_CHARS]
    return list(dict.fromkeys(forms))


def _pattern(form: bytes) -> bytes:
    """One branch for each way of writing the form's first character, each starting with a
    literal byte: the regex engine then skips to the bytes that can start a match (a scan
    in C), instead of trying the whole pattern at every byte of a 32 MiB answer."""
    rest = b"".join(b"(?:" + b"|".join(_ways(byte)) + b")" for byte in form[1:])
    return b"|".join(way + rest for way in _ways(form[0]))


def _ways(byte: int) -> list[bytes]:
    """Every way a lowered text carries one (lower-case) character that a client decodes
    back to it, each a regex starting with a literal byte."""
    char = bytes([byte])
    hex_any = f"{byte:02x}".encode()
    ways = [
        re.escape(char),
        rb"\\\\*u00" + hex_any,  # JSON, escaped once or more
        rb"%(?:25)*" + hex_any,  # percent, once or more
        rb"&#0*" + str(byte).encode() + rb";?",
        rb"&#x0*" + hex_any + rb";?",
    ]
    if char == b"/":
        ways.append(rb"\\\\*/")
    return ways
