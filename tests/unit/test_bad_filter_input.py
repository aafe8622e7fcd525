"""Issue 22, item 11: bad input to ``Tracker.jobs`` filters and key arguments is a typed
error (a ``ValueError`` of the celery_tracked tree), never a bare ``OverflowError`` or
``UnicodeEncodeError``."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from celery_tracked.core.calls import key_problem
from celery_tracked.core.errors import InvalidFilter
from celery_tracked.core.finder import EARLIEST, JobFilter, filter_of


@pytest.mark.parametrize("name", ["created_after", "created_before", "finished_after"])
def test_a_timedelta_reaching_before_year_one_is_an_invalid_filter(name: str) -> None:
    with pytest.raises(InvalidFilter, match=name):
        JobFilter.of(**{name: timedelta(days=999999999)})


@pytest.mark.parametrize("name", ["task_name", "queue", "job_type", "owner_id"])
def test_a_lone_surrogate_in_a_text_filter_is_an_invalid_filter(name: str) -> None:
    with pytest.raises(InvalidFilter, match="lone surrogate"):
        JobFilter.of(**{name: "ok\udcff"})


def test_a_lone_surrogate_makes_a_key_unusable_without_showing_it() -> None:
    problem = key_problem("user:\udcff")
    assert problem is not None and "lone surrogate at character 6 of 6" in problem


def test_a_bound_older_than_every_store_compares_is_the_earliest() -> None:
    """A bound before the year 1000 (MariaDB's DATETIME starts there) selects the same
    jobs as the year 1000: it is sent as that, never as a date a store refuses."""
    far = JobFilter.of(created_after=timedelta(days=700_000), finished_before=timedelta(days=1))
    assert far.created_after == EARLIEST
    old = datetime(5, 1, 1, tzinfo=timezone.utc)
    assert JobFilter.of(created_before=old).created_before == EARLIEST


@pytest.mark.parametrize("name", ["task", "now", "statuses"])
def test_an_unknown_filter_keyword_is_an_invalid_filter(name: str) -> None:
    """``Tracker.jobs(task=...)`` (and ``retry_many``/``cancel_many``): the documented
    ``InvalidFilter`` naming the keyword, never a raw ``TypeError``."""
    with pytest.raises(InvalidFilter, match=f"unknown filter {name!r}"):
        filter_of({name: "x"}, lambda: datetime.now(timezone.utc))  # type: ignore[misc]
