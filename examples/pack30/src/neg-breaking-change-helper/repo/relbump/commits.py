"""Conventional Commits headers."""

from __future__ import annotations

import re
from typing import NamedTuple, Optional

_HEADER = re.compile(r"^(\w+)(?:\(([\w-]+)\))?(!)?: (.+)$")


class Commit(NamedTuple):
    type: str
    scope: Optional[str]
    bang: bool
    subject: str
    body: str


def parse_commit(message: str) -> Commit:
    header, _, body = message.partition("\n")
    match = _HEADER.match(header.strip())
    if match is None:
        return Commit("other", None, False, header.strip(), body)
    kind, scope, bang, subject = match.groups()
    return Commit(kind, scope, bool(bang), subject, body)
