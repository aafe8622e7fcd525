"""The suite's own ordering (``tests/ordering.py``): the long tests first, one at the
head of each xdist worker's share, the others in their order."""

from __future__ import annotations

from dataclasses import dataclass

from tests.ordering import durations_of, longest_first, shares


@dataclass
class Item:
    nodeid: str


def test_shares_are_worksteals_first_distribution() -> None:
    assert shares(221, 4) == [55, 55, 55, 56]
    assert sum(shares(7, 3)) == 7


def test_each_share_starts_with_a_long_test_and_the_others_keep_their_order() -> None:
    items = [Item(f"t::{n}") for n in range(12)]
    seconds = {"t::10": 100.0, "t::11": 40.0, "t::3": 30.0, "t::0": 9.0}
    ordered = [item.nodeid for item in longest_first(items, seconds, workers=3)]
    heads = [ordered[0], ordered[4], ordered[8]]  # shares of 4, 4, 4
    assert heads == ["t::10", "t::11", "t::3"]
    assert sorted(ordered) == sorted(item.nodeid for item in items)
    others = [n for n in ordered if n not in {"t::10", "t::11", "t::3", "t::0"}]
    assert others == sorted(others, key=lambda n: int(n.split("::")[1]))


def test_too_few_items_or_one_worker_keep_the_collection_order() -> None:
    items = [Item(f"t::{n}") for n in range(5)]
    assert longest_first(items, {"t::4": 50.0}, workers=1) == items
    assert longest_first(items, {"t::4": 50.0}, workers=3) == items


def test_durations_read_from_pytests_table_add_setup_call_and_teardown() -> None:
    report = "\n".join(
        [
            "===== slowest durations =====",
            "10.50s call     tests/a.py::test_x",
            "2.00s setup    tests/a.py::test_x",
            "1.00s call     tests/a.py::test_short",
            "(3 durations < 0.005s hidden.)",
        ]
    )
    assert durations_of(report) == {"tests/a.py::test_x": 12.5}
