"""Which requests the gateway forwards: the endpoints the agent CLIs of each wire API need,
under the route's prefix, named by a path decoded until it no longer changes.

An upstream may decode a path once more than the gateway did, or read a backslash or a
``;`` as a separator: so the gateway decodes the target until it is stable, refuses any
path that is not then exactly ``<prefix>/<endpoint>`` from the list below (nothing else
can pass: no ``..``, ``.``, ``//``, ``\\``, ``;``, ``%``, control or non-ASCII character
survives the comparison), and forwards that canonical path, never the bytes it was sent.

Endpoints (relative to the route's base path; ``v1/`` may lead, since an Anthropic base
URL names the host alone and an OpenAI one ends in ``/v1``):

    Anthropic Messages     POST messages (Claude Code), POST messages/count_tokens (its
                           token counts: no model turn, no tokens billed)
    Chat Completions       POST chat/completions (aider, mini-swe-agent)
    Responses              POST responses (Codex)
    model listing          GET models (clients that look their model up first)

Everything else (the Messages batch endpoint, files, stored responses, embeddings, other
methods) is refused and counted as the agent's. Every endpoint forwarded answers in a
shape ``wire.py`` reads, so every answer forwarded is metered and route-locked.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass

ANTHROPIC = "anthropic"
CHAT = "chat"
RESPONSES = "responses"
OTHER = "other"

# (method, endpoint) -> the API whose key header and refusal shape it takes.
ENDPOINTS: dict[tuple[str, str], str] = {
    ("POST", "messages"): ANTHROPIC,
    ("POST", "messages/count_tokens"): ANTHROPIC,
    ("POST", "chat/completions"): CHAT,
    ("POST", "responses"): RESPONSES,
    ("GET", "models"): OTHER,
}
MAX_TARGET_CHARS = 2048  # a request target longer than this is refused unread
MAX_DECODE_ROUNDS = 4  # a path still changing after this many decodings is refused
_QUERY = re.compile(r"[A-Za-z0-9._~=&+-]*")  # what a CLI's query holds (``beta=true``)
_VERSION = "v1/"


@dataclass(frozen=True)
class Route:
    """An allowed request: the canonical target to forward and the API it speaks."""

    target: str
    api: str
    endpoint: str  # a key of ENDPOINTS, e.g. "chat/completions"


def decoded(path: str) -> str | None:
    """``path`` percent-decoded until stable; ``None`` when it never settles."""
    for _ in range(MAX_DECODE_ROUNDS):
        once = urllib.parse.unquote(path, errors="strict")
        if once == path:
            return path
        path = once
    return None


def route(prefix: str, method: str, target: str, anthropic_version: bool) -> Route | None:
    """The route of a request for ``target`` (as sent), or ``None`` when it is refused.

    ``prefix`` is the upstream's base path without its trailing slash. A model listing
    takes the key header of Anthropic when the request names an ``anthropic-version``."""
    if len(target) > MAX_TARGET_CHARS or not target.startswith("/"):
        return None  # absolute-form ("http://other/...") or asterisk-form targets
    raw_path, has_query, query = target.partition("?")
    try:
        path = decoded(raw_path)
    except UnicodeDecodeError:
        return None
    if path is None or not path.startswith(prefix + "/"):
        return None
    endpoint = path[len(prefix) + 1 :]
    if endpoint.startswith(_VERSION) and not prefix.endswith("/v1"):
        endpoint = endpoint[len(_VERSION) :]
    api = ENDPOINTS.get((method, endpoint))
    if api is None or (has_query and not _QUERY.fullmatch(query)):
        return None
    if api == OTHER and anthropic_version:
        api = ANTHROPIC
    canonical = path + (f"?{query}" if query else "")
    return Route(canonical, api, endpoint)
