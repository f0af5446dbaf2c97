"""The pure choice of what a worker with ``--disk-budget`` evicts, and the status note."""

from __future__ import annotations

import pytest

from runner.distributed.disk_budget import CACHE, IMAGE, Item, choose, shown
from runner.run.status import disk_note
from tests.conftest import run_cli

MIB = 1 << 20


def _image(key: str, size_mib: int, used: float) -> Item:
    return Item(IMAGE, key, size_mib * MIB, used)


def test_under_the_budget_nothing_is_evicted() -> None:
    items = [_image("a", 2, 1.0), _image("b", 3, 2.0)]
    choice = choose(items, set(), 5 * MIB)
    assert choice.evict == () and choice.used == choice.after == 5 * MIB and choice.over == 0


def test_least_recently_used_first_and_no_more_than_it_takes() -> None:
    items = [_image("new", 2, 30.0), _image("old", 2, 10.0), _image("mid", 2, 20.0)]
    choice = choose(items, set(), 3 * MIB)
    assert [i.key for i in choice.evict] == ["old", "mid"]
    assert choice.after == 2 * MIB and choice.over == 0
    one = choose(items, set(), 4 * MIB)
    assert [i.key for i in one.evict] == ["old"]


def test_a_needed_item_is_never_evicted_even_when_least_recently_used() -> None:
    items = [_image("pinned", 4, 1.0), _image("spare", 1, 2.0), _image("recent", 1, 3.0)]
    choice = choose(items, {(IMAGE, "pinned")}, 4 * MIB)
    assert [i.key for i in choice.evict] == ["spare", "recent"]
    assert all(i.key != "pinned" for i in choice.evict)
    assert choice.after == 4 * MIB and choice.over == 0


def test_needed_items_alone_over_the_budget_say_by_how_much() -> None:
    items = [_image("pinned", 4, 1.0), Item(CACHE, "blobs/ab/ab12", 1 * MIB, 2.0)]
    choice = choose(items, {(IMAGE, "pinned")}, 2 * MIB)
    assert [i.key for i in choice.evict] == ["blobs/ab/ab12"]
    assert choice.over == 2 * MIB
    nothing = choose(items, {(IMAGE, "pinned"), (CACHE, "blobs/ab/ab12")}, 0)
    assert nothing.evict == () and nothing.over == 5 * MIB


def test_need_is_per_kind_and_ties_are_broken_the_same_way_each_time() -> None:
    items = [Item(CACHE, "k", MIB, 5.0), Item(IMAGE, "k", MIB, 5.0)]
    choice = choose(items, {(IMAGE, "k")}, MIB)
    assert choice.evict == (Item(CACHE, "k", MIB, 5.0),)
    tied = [_image("b", 1, 5.0), _image("a", 1, 5.0), Item(CACHE, "c", MIB, 5.0)]
    first = choose(tied, set(), MIB)
    assert [(i.kind, i.key) for i in first.evict] == [(CACHE, "c"), (IMAGE, "a")]
    assert choose(list(reversed(tied)), set(), MIB).evict == first.evict


@pytest.mark.parametrize(
    ("size", "text"),
    [(0, "0 B"), (1023, "1023 B"), (1536, "1.5 KiB"), (5 * MIB, "5.0 MiB"), (3 << 30, "3.0 GiB")],
)
def test_sizes_for_people(size: int, text: str) -> None:
    assert shown(size) == text


def test_status_note_of_a_worker_over_its_budget() -> None:
    entry = {
        "budget": 5 * MIB,
        "used": 6 * MIB,
        "images": 2,
        "image_bytes": 5 * MIB,
        "cache_bytes": MIB,
        "over": MIB,
    }
    assert disk_note(entry) == (
        "disk 6.0 MiB of 5.0 MiB (2 image(s) 5.0 MiB, cache 1.0 MiB), "
        "over by 1.0 MiB: live runs need it"
    )
    assert disk_note({"budget": "x"}).startswith("disk ? of ? (? image(s) ?")


def test_a_budget_that_is_not_a_size_is_one_line_before_anything_starts() -> None:
    done = run_cli("worker", "--broker", "redis://127.0.0.1:1/0", "--disk-budget", "50 gigs")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().count("\n") == 0 and "Traceback" not in done.stderr
    assert "--disk-budget" in done.stderr and "like 512m or 1g" in done.stderr
