"""Where a machine that runs model gateways finds a route's provider key.

A route names its key by a variable name (``route.api_key_env``), never by value. The
key is looked up, each time a gateway starts, first in this process's environment and
then, when ``DELTARUN_MODEL_KEYS`` names a directory, in the file of that name there
(``$DELTARUN_MODEL_KEYS/ANTHROPIC_API_KEY``: the key, one trailing newline allowed).

Why a file as well as the variable: a worker's environment is copied into every process
it starts (Celery's pool children, ``git``, ``docker``), shown by ``docker inspect`` of a
worker container and written into compose and unit files; a key file is read by the
worker alone, only on the hosts it is mounted on, and read again at each trial, so a key
rotated on disk is used from the next trial without restarting anything. Either way the
key goes from here only into the trial's gateway container (``runner.sandbox``), never
into a sandbox, a record or a log (docs/many-machines.md, "Installed agents on the fleet").

Where a key may go. The route (its ``base_url``) comes with the controls, and controls come
with a suite, which is hostile until proven otherwise: a route could name the user's own
``OPENAI_API_KEY`` and an upstream of its author's. So a key goes only where its owner
agreed: to a URL under a base that ``$DELTARUN_MODEL_KEYS/NAME.upstream`` lists, when that
file exists; else, for a provider's own variable (``PROVIDER_UPSTREAMS``), to that
provider's API only; else nowhere. Any other variable is refused until its owner names
where it goes, since a route may name any variable of the environment it runs in
(``GITHUB_TOKEN``, ``AWS_SECRET_ACCESS_KEY``), not only a model key.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from runner.bounded_input import excerpt, read_capped
from runner.errors import UserError

KEYS_DIR_ENV = "DELTARUN_MODEL_KEYS"
# The variables providers document for their keys, and the API each key is for: without
# an owner's NAME.upstream, such a key is sent there and nowhere else.
PROVIDER_UPSTREAMS: dict[str, tuple[str, ...]] = {
    "ANTHROPIC_API_KEY": ("https://api.anthropic.com",),
    "OPENAI_API_KEY": ("https://api.openai.com",),
    "GEMINI_API_KEY": ("https://generativelanguage.googleapis.com",),
    "GOOGLE_API_KEY": ("https://generativelanguage.googleapis.com",),
    "MISTRAL_API_KEY": ("https://api.mistral.ai",),
    "DEEPSEEK_API_KEY": ("https://api.deepseek.com",),
    "OPENROUTER_API_KEY": ("https://openrouter.ai/api",),
    "GROQ_API_KEY": ("https://api.groq.com",),
    "TOGETHER_API_KEY": ("https://api.together.xyz",),
    "XAI_API_KEY": ("https://api.x.ai",),
}
KEY_FILE_CAP = 16 << 10
_NAME = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*\Z")  # route.api_key_env's own pattern


def model_key(name: str, upstream: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The key named ``name``: the variable ``name`` in ``environ`` (default this process's
    environment), else the file ``name`` in the directory ``$DELTARUN_MODEL_KEYS``; None
    when neither has one. A file that is there but unreadable, too large or empty is one
    line naming it (``UserError``): a key file the operator meant is never taken as no key.

    ``upstream`` is where the key is to be sent (the route's ``base_url``): when the
    directory holds ``NAME.upstream`` (base URLs, one a line), the key goes only to a URL
    under one of them, whoever wrote the route; without that file a provider's own variable
    goes only to its provider, and any other variable nowhere (``UserError`` otherwise)."""
    env = os.environ if environ is None else environ
    directory = env.get(KEYS_DIR_ENV)
    if _NAME.match(name):
        check_upstream(Path(directory) if directory else None, name, upstream)
    value = env.get(name)
    if value:
        return value
    if not directory or not _NAME.match(name):  # a name is never a path
        return None
    path = Path(directory) / name
    if not path.exists():
        return None
    key = _one_line(path, "the model key file must hold the key alone on one line")
    if not key:
        raise UserError(f"{path}: the model key file is empty; write the key there")
    return key


def check_upstream(directory: Path | None, name: str, upstream: str) -> None:
    """``upstream`` is under a base URL ``directory/NAME.upstream`` lists or, without that
    file, under the provider's API for a provider's own variable; ``UserError`` naming the
    file or the provider, and how to list the upstream, otherwise."""
    path = directory / f"{name}.upstream" if directory is not None else None
    if path is not None and path.exists():
        text = read_capped(path, KEY_FILE_CAP, "a model key's upstream list")
        allowed = [
            line.strip().rstrip("/")
            for line in text.decode("utf-8", "replace").splitlines()
            if line.strip()
        ]
        if not _under(upstream, allowed):
            raise UserError(
                f"route.base_url {excerpt(upstream)} is not an upstream the key {name} may be "
                f"sent to ({path} lists {len(allowed)}); add it there if it is yours"
            )
        return
    provider = PROVIDER_UPSTREAMS.get(name)
    if provider is None:
        raise UserError(
            f"route.base_url {excerpt(upstream)}: no one has said the key {name} may be sent "
            f"there (a route comes with the controls, and may name any variable); if that "
            f"server is yours, {_how_to_list(directory, name, upstream)}"
        )
    if not _under(upstream, provider):
        raise UserError(
            f"route.base_url {excerpt(upstream)}: {name} is the key of {provider[0]}, and goes "
            f"nowhere else unless you say so; {_how_to_list(directory, name, upstream)}"
        )


def _how_to_list(directory: Path | None, name: str, upstream: str) -> str:
    """The fix for a key refused for ``upstream``: the owner's list, and where it lives."""
    where = (
        f"the file {directory / f'{name}.upstream'}"
        if directory is not None
        else f"a file {name}.upstream in a directory of yours named by ${KEYS_DIR_ENV}"
    )
    return f"write {excerpt(upstream)} on a line of {where}"


def _under(upstream: str, bases: Sequence[str]) -> bool:
    """``upstream`` is one of ``bases`` or a URL under one (a path below it, same scheme,
    host and port: ``https://api.x.test.evil`` and ``http://api.x.test`` are not)."""
    wanted = upstream.rstrip("/")
    return any(wanted == base or wanted.startswith(base + "/") for base in bases)


def _one_line(path: Path, why: str) -> str:
    data = read_capped(path, KEY_FILE_CAP, "a model key file")
    text = data.decode("utf-8", "replace").removesuffix("\n").removesuffix("\r")
    if any(ch in text for ch in "\r\n\0"):
        raise UserError(f"{path}: {why}; write the key there (or unset {KEYS_DIR_ENV})")
    return text


def where_keys_are(name: str, environ: Mapping[str, str] | None = None) -> str:
    """Where ``model_key`` looked for ``name`` and found nothing, for a missing-key line."""
    env = os.environ if environ is None else environ
    directory = env.get(KEYS_DIR_ENV)
    if directory:
        return f"environment variable {name} is not set and {Path(directory) / name} does not exist"
    return f"environment variable {name} is not set (nor {KEYS_DIR_ENV}, a directory of key files)"
