"""Issue 14 item 5: one validation module; each check raises the typed error of where the
value was given, with the message it had."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

import pytest

from celery_tracked.core.errors import (
    InvalidFilter,
    InvalidPayload,
    InvalidProgress,
    InvalidTaskOption,
)
from celery_tracked.core.validation import (
    Bound,
    check_filter_text,
    check_limit,
    check_number,
    check_progress,
    delay_ms,
    finite,
    is_number,
    window_seconds,
    within,
)


@pytest.mark.parametrize("value", [True, "1", None, math.nan])
def test_numbers_are_real_never_booleans(value: Any) -> None:
    assert finite(value) is None
    assert is_number(value) is isinstance(value, float)


def test_a_bound_holds_zero_only_when_it_says_what_zero_means() -> None:
    assert not within(0, Bound(1, 10)) and within(0, Bound(1, 10, zero="off"))
    assert within(10**400, Bound(1, 10**500)) and not within(math.inf, Bound(1, 10**9))


def test_each_check_raises_its_callers_error() -> None:
    with pytest.raises(InvalidTaskOption, match="max_attempts: must be an integer from 1"):
        check_number("max_attempts", 0, Bound(1, 5), True)
    with pytest.raises(InvalidTaskOption, match="retry_backoff: must be a number of seconds"):
        delay_ms("retry_backoff", True)
    assert delay_ms("retry_backoff", 1.5) == 1500
    with pytest.raises(InvalidTaskOption, match=r"throttle_s: must be > 0 seconds"):
        window_seconds("throttle_s", 0, positive=True)
    with pytest.raises(InvalidFilter, match="queue: at most 3 characters"):
        check_filter_text("queue", "abcd", 3)
    with pytest.raises(InvalidFilter, match="limit: at most 5, got 6"):
        check_limit(6, 5)
    with pytest.raises(InvalidProgress, match="from 0 to 100"):
        check_progress(math.inf)
    assert check_progress(99.9, "s") == (99, "s")


def test_enqueue_checks_raise_invalid_payload() -> None:
    from celery_tracked.core.validation import check_options, check_text, positive

    with pytest.raises(InvalidPayload, match="owner_id must be 1-3 characters, got 4"):
        check_text("abcd", "owner_id", 3)
    with pytest.raises(InvalidPayload, match="max_attempts must be a positive integer"):
        positive(0, "max_attempts")
    with pytest.raises(InvalidPayload, match="countdown must be a number of seconds from "):
        check_options({"countdown": math.nan})
    check_options({"eta": datetime(2030, 1, 1), "expires": 5})
