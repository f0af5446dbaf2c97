"""Connecting to Redis, for the coordinator and the workers alike: one line per failure,
naming the cause (password, TLS, address), with the password masked."""

from __future__ import annotations

import redis

from runner.distributed.credentials import redact, scrub, with_tls
from runner.errors import UserError


def connect_redis(url: str) -> redis.Redis:
    """A Redis client for ``url``; ``UserError`` in one line when it is wrong or unreachable."""
    with_tls(url, "--broker", {})  # the URL's form (and no certificate check turned off)
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=30)
        client.ping()
    except (redis.RedisError, ValueError, OSError) as exc:
        raise UserError(f"Redis at {redact(url)}: {explain(exc, url)}") from None
    return client


def explain(exc: BaseException, url: str) -> str:
    """What a failed connection means and what to change, without the password."""
    text = scrub(str(exc), url)
    lowered = text.lower()
    tls = url.startswith("rediss://")
    if "wrongpass" in lowered or "invalid username-password" in lowered:
        return "the user name or password is wrong; fix it in the broker URL"
    if (
        "noauth" in lowered
        or "authentication required" in lowered
        or "already authenticated" in lowered
    ):
        return (
            "it needs a password; give rediss://USER:PASSWORD@HOST:PORT/0 through "
            "--broker-file or $DELTARUN_BROKER_URL"
        )
    if "certificate verify failed" in lowered or "certificate_verify_failed" in lowered:
        return (
            f"its TLS certificate is not trusted ({text}); give the CA that signed it with "
            "--broker-ca, and reach it by a name or address the certificate lists"
        )
    if "certificate required" in lowered or "certificate_required" in lowered:
        return "it asks for a client certificate; give --broker-cert and --broker-key"
    if tls and "ssl_certfile" not in url and ("eof occurred" in lowered or "reset" in lowered):
        return (
            f"it closed the TLS connection ({text}): it asks for a client certificate; "
            "give --broker-cert and --broker-key"
        )
    if tls and ("wrong version number" in lowered or "record layer" in lowered):
        return "it does not speak TLS on this port; use redis:// or the server's TLS port"
    if not tls and ("closed by server" in lowered or "reset by peer" in lowered):
        return f"the connection was closed ({text}); if the server speaks TLS, use rediss://"
    if "ssl" in lowered or "tls" in lowered:
        return f"TLS failed ({text}); check --broker-ca, --broker-cert and --broker-key"
    return f"unreachable ({text}); start Redis or fix the broker URL"
