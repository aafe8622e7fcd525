"""``finder.filter_of``: a ``timedelta`` bound is taken back from the clock it is given
(the database's, in ``Tracker.jobs``), which is read only when such a bound is given."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from celery_tracked.core.finder import filter_of
from celery_tracked.core.keys import KeyLifetime, KeyRule

DB_NOW = datetime(2030, 1, 1, 12, 0, tzinfo=timezone.utc)


def test_a_relative_bound_is_taken_back_from_the_given_clock() -> None:
    reads: list[int] = []

    def clock() -> datetime:
        reads.append(1)
        return DB_NOW

    chosen = filter_of({"created_after": timedelta(minutes=5), "queue": "q"}, clock)
    assert chosen.created_after == DB_NOW - timedelta(minutes=5)
    assert reads == [1]


def test_no_relative_bound_reads_no_clock() -> None:
    def clock() -> datetime:
        raise AssertionError("the clock was read")

    assert filter_of({"status": "failed", "created_before": DB_NOW}, clock).created_before == (
        DB_NOW
    )
    assert filter_of({}, clock).empty


def test_only_a_throttle_compares_times() -> None:
    assert KeyRule(KeyLifetime.THROTTLE, throttle_s=1.0).timed
    assert not any(KeyRule(k).timed for k in KeyLifetime if k is not KeyLifetime.THROTTLE)
