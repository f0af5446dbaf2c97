"""Where the broker URL, its TLS files and the job key come from; secrets never printed.

The broker URL (it may hold Redis's password) is taken from ``--broker``, else the
first line of ``--broker-file``, else ``$DELTARUN_BROKER_URL``: the file and the
environment keep the password out of ``ps``. A ``rediss://`` URL always checks the
server's certificate; ``--broker-ca``, ``--broker-cert`` and ``--broker-key`` (or
``$DELTARUN_BROKER_CA``/``_CERT``/``_KEY``) add the CA and a client certificate.
They are folded into the URL's query (``ssl_ca_certs``, ``ssl_certfile``,
``ssl_keyfile``, ``ssl_cert_reqs=required``), which redis-py and Celery's Redis
transport both read, so one string configures every connection.

The job key signs jobs and records (``runner.distributed.signing``): ``--job-key-file``,
else ``$DELTARUN_JOB_KEY`` (the key itself), else ``$DELTARUN_JOB_KEY_FILE``, else
``~/.config/deltarun/job.key``, made (mode 0600) on first use. A coordinator and the
workers on one account share it without a step; a worker on another machine needs a
copy of the file, and until it has one it refuses the run's jobs (the coordinator says so).
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from runner.errors import UsageError, UserError

ENV_URL = "DELTARUN_BROKER_URL"
ENV_TLS = {"ca": "DELTARUN_BROKER_CA", "cert": "DELTARUN_BROKER_CERT", "key": "DELTARUN_BROKER_KEY"}
ENV_JOB_KEY = "DELTARUN_JOB_KEY"
ENV_JOB_KEY_FILE = "DELTARUN_JOB_KEY_FILE"
MIN_KEY_CHARS = 32
_TLS_QUERY = {"ca": "ssl_ca_certs", "cert": "ssl_certfile", "key": "ssl_keyfile"}
_NO_CHECK = {"none", "cert_none", "optional", "cert_optional"}


@dataclass(frozen=True)
class BrokerOptions:
    """What the command line said about the broker (every field optional)."""

    url: str | None = None
    file: Path | None = None
    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None


@dataclass(frozen=True)
class Broker:
    """A resolved broker: the URL every client uses, and where it came from."""

    url: str
    source: str  # "--broker", "--broker-file PATH" or "$DELTARUN_BROKER_URL"
    warnings: tuple[str, ...] = ()

    @property
    def shown(self) -> str:
        return redact(self.url)


def resolve_broker(options: BrokerOptions, environ: Mapping[str, str]) -> Broker | None:
    """The broker the options and the environment name, or None when none does."""
    warnings: list[str] = []
    if options.url is not None and options.file is not None:
        raise UsageError("give --broker or --broker-file, not both")
    if options.url is not None:
        url, source = options.url.strip(), "--broker"
        if _password(url):
            warnings.append(
                "the password in --broker is visible to every user of this machine (ps); "
                f"put the URL in a 0600 file given with --broker-file, or in ${ENV_URL}"
            )
    elif options.file is not None:
        url, source = _read_url_file(options.file), f"--broker-file {options.file}"
        if _password(url) and _shared(options.file):
            warnings.append(
                f"{options.file} holds the broker's password and other users can read it; "
                f"chmod 600 {options.file}"
            )
    elif environ.get(ENV_URL, "").strip():
        url, source = environ[ENV_URL].strip(), f"${ENV_URL}"
    else:
        if any((options.ca, options.cert, options.key)):
            raise UsageError("--broker-ca/--broker-cert/--broker-key need a broker URL too")
        return None
    tls = {
        name: getattr(options, name) or _env_path(environ, variable)
        for name, variable in ENV_TLS.items()
    }
    return Broker(with_tls(url, source, tls), source, tuple(warnings))


def with_tls(url: str, source: str, files: Mapping[str, Path | None]) -> str:
    """``url`` checked (a Redis URL; a ``rediss://`` one never skips the certificate check)
    with the TLS ``files`` (ca, cert, key) added to its query."""
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise UserError(
            f"{source}: {redact(url)!r} is not a Redis URL; write it like redis://HOST:6379/0 "
            "(or rediss://USER:PASSWORD@HOST:6379/0 for TLS)"
        )
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    given = {name: path for name, path in files.items() if path is not None}
    if parts.scheme != "rediss":
        if given or any(name.startswith("ssl_") for name in query):
            raise UsageError(
                f"{source}: TLS options (--broker-ca/--broker-cert/--broker-key) need a "
                "rediss:// URL; write rediss:// instead of redis://"
            )
        return url
    reqs = query.get("ssl_cert_reqs", "required").lower()
    if reqs in _NO_CHECK or query.get("ssl_check_hostname", "").lower() == "false":
        raise UserError(
            f"{source}: the URL turns off the check of the server's certificate; remove "
            "ssl_cert_reqs/ssl_check_hostname and give the server's CA with --broker-ca"
        )
    query["ssl_cert_reqs"] = "required"
    for name, path in given.items():
        if not path.is_file() or not os.access(path, os.R_OK):
            flag = f"--broker-{name}"
            raise UserError(f"{flag} {path}: no readable file there; give the PEM file's path")
        query[_TLS_QUERY[name]] = str(path.resolve())
    if ("ssl_certfile" in query) != ("ssl_keyfile" in query):
        raise UsageError(
            f"{source}: a client certificate needs its key: give --broker-cert and --broker-key"
        )
    return urlunsplit(parts._replace(query=urlencode(query)))


def redact(url: str) -> str:
    """A broker URL without its password (the user name is kept) and without its query (the
    TLS files, said as " (TLS)"), for every message and log."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if parts.password is not None:
        netloc = f"{parts.username or ''}:***@{netloc.rsplit('@', 1)[1]}"
    shown = urlunsplit(parts._replace(netloc=netloc, query="", fragment=""))
    return f"{shown} (TLS)" if parts.scheme == "rediss" else shown


def scrub(text: str, url: str) -> str:
    """``text`` (an error from a client library) with the URL's password masked."""
    password = _password(url)
    return text.replace(url, redact(url)).replace(password, "***") if password else text


def _password(url: str) -> str:
    try:
        return urlsplit(url).password or ""
    except ValueError:
        return ""


def _read_url_file(path: Path) -> str:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"--broker-file {path}: cannot read it ({exc.__class__.__name__})") from exc
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            return line.strip()
    raise UserError(f"--broker-file {path}: no URL in it; write one line like redis://HOST:6379/0")


def _shared(path: Path) -> bool:
    try:
        return bool(path.stat().st_mode & 0o077)
    except OSError:
        return False


def _env_path(environ: Mapping[str, str], variable: str) -> Path | None:
    value = environ.get(variable, "").strip()
    return Path(value) if value else None


# -- the job key ---------------------------------------------------------------------------


@dataclass(frozen=True)
class JobKey:
    key: bytes
    source: str  # a path, or "$DELTARUN_JOB_KEY"
    created: bool = False


def default_key_path(environ: Mapping[str, str]) -> Path:
    base = environ.get("XDG_CONFIG_HOME") or str(Path(environ.get("HOME", "~")) / ".config")
    return Path(base).expanduser() / "deltarun" / "job.key"


def load_job_key(option: Path | None, environ: Mapping[str, str]) -> JobKey:
    """The job key the option or the environment names; the default file is made (0600)
    when missing, a named one must exist."""
    if option is not None:
        return JobKey(_key_text(_read_key(option, "--job-key-file"), str(option)), str(option))
    if environ.get(ENV_JOB_KEY, "").strip():
        return JobKey(_key_text(environ[ENV_JOB_KEY], f"${ENV_JOB_KEY}"), f"${ENV_JOB_KEY}")
    if environ.get(ENV_JOB_KEY_FILE, "").strip():
        path = Path(environ[ENV_JOB_KEY_FILE].strip())
        return JobKey(_key_text(_read_key(path, f"${ENV_JOB_KEY_FILE}"), str(path)), str(path))
    path = default_key_path(environ)
    created = _create_key(path)
    return JobKey(_key_text(_read_key(path, "the default job key"), str(path)), str(path), created)


def _read_key(path: Path, what: str) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        raise UserError(
            f"{what} {path}: no such file; copy the coordinator's job key there "
            "(or make one: python3 -c 'import secrets; print(secrets.token_hex(32))' > FILE)"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{what} {path}: cannot read it ({exc.__class__.__name__})") from exc


def _key_text(text: str, source: str) -> bytes:
    key = text.strip()
    if len(key) < MIN_KEY_CHARS or re.search(r"\s", key):
        raise UserError(
            f"job key {source}: needs at least {MIN_KEY_CHARS} characters on one line "
            "(make one: python3 -c 'import secrets; print(secrets.token_hex(32))')"
        )
    return key.encode()


def _create_key(path: Path) -> bool:
    """Make a new random key at ``path`` unless one is there; True when made here."""
    if path.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_hex(32) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.link(temp, path)  # whole or absent: a process reading at the same time sees no half
    except FileExistsError:  # another process made it first: use theirs
        return False
    except OSError as exc:
        raise UserError(
            f"cannot make the job key {path} ({exc.strerror}); set {ENV_JOB_KEY_FILE} to a "
            "key file, or pass --job-key-file"
        ) from exc
    finally:
        temp.unlink(missing_ok=True)
    return True
