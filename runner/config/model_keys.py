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
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from runner.bounded_input import excerpt, read_capped
from runner.errors import UserError

KEYS_DIR_ENV = "DELTARUN_MODEL_KEYS"
KEY_FILE_CAP = 16 << 10
_NAME = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*\Z")  # route.api_key_env's own pattern


def model_key(
    name: str, environ: Mapping[str, str] | None = None, upstream: str | None = None
) -> str | None:
    """The key named ``name``: the variable ``name`` in ``environ`` (default this process's
    environment), else the file ``name`` in the directory ``$DELTARUN_MODEL_KEYS``; None
    when neither has one. A file that is there but unreadable, too large or empty is one
    line naming it (``UserError``): a key file the operator meant is never taken as no key.

    ``upstream`` is where the key is about to be sent (the route's ``base_url``): when the
    directory holds ``NAME.upstream`` (base URLs, one a line), the key goes only to a URL
    under one of them, whoever wrote the route (``UserError`` otherwise)."""
    env = os.environ if environ is None else environ
    directory = env.get(KEYS_DIR_ENV)
    if directory and upstream is not None and _NAME.match(name):
        check_upstream(Path(directory), name, upstream)
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


def check_upstream(directory: Path, name: str, upstream: str) -> None:
    """``upstream`` is under a base URL ``directory/NAME.upstream`` lists, or that file is
    absent; ``UserError`` naming the file otherwise."""
    path = directory / f"{name}.upstream"
    if not path.exists():
        return
    text = read_capped(path, KEY_FILE_CAP, "a model key's upstream list").decode("utf-8", "replace")
    allowed = [line.strip().rstrip("/") for line in text.splitlines() if line.strip()]
    wanted = upstream.rstrip("/")
    if not any(wanted == base or wanted.startswith(base + "/") for base in allowed):
        raise UserError(
            f"route.base_url {excerpt(upstream)} is not an upstream the key {name} may be sent "
            f"to ({path} lists {len(allowed)}); add it there if it is yours"
        )


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
