"""Issue 22, item 11: bad input to ``Tracker.jobs`` filters and key arguments is a typed
error (a ``ValueError`` of the celery_tracked tree), never a bare ``OverflowError`` or
``UnicodeEncodeError``."""

from __future__ import annotations

from datetime import timedelta

import pytest

from celery_tracked.core.calls import key_problem
from celery_tracked.core.errors import InvalidFilter
from celery_tracked.core.finder import JobFilter


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
