"""Local time."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from sitetime.sites import SITES


def local_time(site: str, instant: datetime) -> datetime:
    """*instant* (aware) as local standard time at *site*."""
    if instant.tzinfo is None:
        raise ValueError("instant must be timezone-aware")
    try:
        offset = SITES[site]
    except KeyError:
        raise ValueError(f"unknown site {site!r}") from None
    return instant.astimezone(timezone(timedelta(minutes=offset), site))
