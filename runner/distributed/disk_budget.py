"""A worker's disk budget: which images and cache entries to evict. Pure.

``deltarun worker --disk-budget SIZE`` bounds what the worker keeps on its disk for
trials: the sandbox images and agent layers it pulled from a run's registry, and the
entries of its fixture cache (``runner.trees.cache``: blobs, git repositories, trees).
Each round the glue (``runner.distributed.disk_budget_keeper``) lists those as
``Item``s and asks ``choose`` which to remove: the least recently used first, never one
that is needed (an image a live run pins, an image a container uses, a cache entry read
a moment ago), until the rest fits the budget. When the needed ones alone exceed it,
nothing more can go: ``Choice.over`` says by how much, and the worker says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Set
from dataclasses import dataclass

IMAGE, CACHE = "image", "cache"


@dataclass(frozen=True)
class Item:
    """One thing on the worker's disk: an image (``key`` its ID) or a cache entry (``key``
    its path in the cache). ``size`` in bytes, ``last_used`` in epoch seconds."""

    kind: str
    key: str
    size: int
    last_used: float


@dataclass(frozen=True)
class Choice:
    """Every item listed, what to evict of them (least recently used first), and the
    bytes before and after."""

    budget: int
    items: tuple[Item, ...]
    evict: tuple[Item, ...]

    @property
    def used(self) -> int:
        return sum(item.size for item in self.items)

    @property
    def after(self) -> int:
        return self.used - sum(item.size for item in self.evict)

    @property
    def over(self) -> int:
        """Bytes above the budget once every evictable item went: what live runs need."""
        return max(0, self.after - self.budget)


def choose(items: Iterable[Item], needed: Set[tuple[str, str]], budget: int) -> Choice:
    """The items to evict so that the rest fits ``budget`` bytes: least recently used first
    (ties by kind and key, so the choice is the same on every call), never an item whose
    ``(kind, key)`` is in ``needed``, and no more than it takes to fit."""
    listed = tuple(items)
    evict: list[Item] = []
    excess = sum(item.size for item in listed) - budget
    for item in sorted(listed, key=lambda i: (i.last_used, i.kind, i.key)):
        if excess <= 0:
            break
        if (item.kind, item.key) in needed:
            continue
        evict.append(item)
        excess -= item.size
    return Choice(budget, listed, tuple(evict))


def shown(size: int) -> str:
    """Bytes for a person: ``512 B``, ``3.2 MiB``, ``1.5 GiB``."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
