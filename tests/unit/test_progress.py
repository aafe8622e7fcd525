"""Progress and log lines, the pure decisions: the checks, Celery's PROGRESS meta, the
text of a log line, and the coalescing of writes (an injected clock)."""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest

from celery_tracked import InvalidProgress
from celery_tracked.core.redact import Redaction
from celery_tracked.services import progress as p
from celery_tracked.services.progress import Coalescer


@pytest.mark.parametrize(
    ("percent", "stored"),
    [(0, 0), (100, 100), (42, 42), (99.9, 99), (0.5, 0), (Fraction(1, 3) * 100, 33)],
)
def test_a_percent_from_0_to_100_is_stored_rounded_down(percent: Any, stored: int) -> None:
    assert p.check_progress(percent) == (stored, None)


@pytest.mark.parametrize(
    "percent",
    [True, False, math.nan, math.inf, -0.1, 100.01, 101, -1, 10**400, "50", None, Decimal(5)],
)
def test_a_percent_that_is_no_number_from_0_to_100_is_refused(percent: Any) -> None:
    with pytest.raises(InvalidProgress):
        p.check_progress(percent)


def test_invalid_progress_is_a_value_error_of_the_library() -> None:
    from celery_tracked import TrackedError

    assert issubclass(InvalidProgress, ValueError) and issubclass(InvalidProgress, TrackedError)


@pytest.mark.parametrize("stage", ["x" * 201, "a\x00b", 7, b"bytes"])
def test_a_stage_too_long_with_nul_or_not_a_string_is_refused(stage: Any) -> None:
    with pytest.raises(InvalidProgress):
        p.check_progress(10, stage)


def test_a_stage_of_200_characters_is_kept() -> None:
    assert p.check_progress(10, "s" * 200) == (10, "s" * 200)


@pytest.mark.parametrize(
    ("meta", "value"),
    [
        ({"current": 3, "total": 4}, (75, None)),
        ({"current": 1, "total": 3, "stage": "ocr"}, (33, "ocr")),
        ({"current": 5, "total": 4}, (100, None)),  # over the total: clamped, not refused
        ({"current": -1, "total": 4}, (0, None)),
        ({"percent": 12.5, "current": 1, "total": 2}, (12, None)),  # percent wins
        ({"percent": 250}, (100, None)),
        ({"current": 1, "total": 2, "stage": "x" * 300}, (50, "x" * 200)),
        ({"current": 1, "total": 2, "stage": "a\x00b"}, (50, "ab")),
        ({"current": 1, "total": 2, "stage": 3}, (50, None)),
    ],
)
def test_celerys_progress_meta_gives_a_percent(meta: dict[str, Any], value: p.Value) -> None:
    assert p.progress_of_meta(meta) == value


@pytest.mark.parametrize(
    "meta",
    [
        None,
        "50%",
        {},
        {"current": 1},
        {"current": 1, "total": 0},
        {"current": "1", "total": "2"},
        {"current": True, "total": 2},
        {"percent": math.nan},
        {"current": math.inf, "total": 2},
        {"current": 10**400, "total": 2},
    ],
)
def test_meta_without_progress_gives_none(meta: Any) -> None:
    assert p.progress_of_meta(meta) is None


def test_outside_a_tracked_run_set_progress_and_log_validate_then_do_nothing() -> None:
    # outside a tracked run the adapter finds no sink on its request (None)
    assert p.set_progress(None, 50, "stage") is False
    assert p.log(None, "hello") is False
    assert p.from_update_state(None, "id", None, "PROGRESS", {"current": 1, "total": 2}) is False
    assert p.cancel_requested(None) is False
    with pytest.raises(InvalidProgress):
        p.set_progress(None, 150)
    with pytest.raises(InvalidProgress):
        p.log(None, "hello", level="fatal")


class FakeReporter:
    def __init__(self) -> None:
        self.values: list[p.Value] = []
        self.lines: list[tuple[str, str]] = []

    def progress(self, percent: int, stage: str | None) -> None:
        self.values.append((percent, stage))

    def log(self, message: str, level: str) -> bool:
        self.lines.append((message, level))
        return True

    def cancel_requested(self) -> bool:
        return True


def test_inside_a_run_the_calls_reach_the_sink_they_are_given() -> None:
    # which sink a body's call reaches (its own run's, none for another task's body or
    # after the run): tests/unit/test_attempt_hooks.py
    reporter = FakeReporter()
    assert p.set_progress(reporter, 10.7, "a") is True
    assert p.log(reporter, 42, "warning") is True
    assert p.from_update_state(reporter, "id", None, "PROGRESS", {"current": 1, "total": 2})
    assert p.from_update_state(reporter, "id", "id", "PROGRESS", {"percent": 60})
    assert not p.from_update_state(reporter, "id", "other-id", "PROGRESS", {"percent": 70})
    assert not p.from_update_state(reporter, "id", None, "STARTED", {"percent": 80})
    assert p.cancel_requested(reporter) is True
    assert reporter.values == [(10, "a"), (50, None), (60, None)]
    assert reporter.lines == [("42", "warning")]


def test_a_log_line_is_masked_before_it_is_cut() -> None:
    secret = "hunter22"
    text = p.log_text("x" * 995 + secret, "info", [secret])
    assert secret not in text and "hunter" not in text and text.endswith("x***")
    long = p.log_text("y" * 5000, "info")
    assert len(long) == p.MAX_LOG_CHARS and long.endswith("…")
    masked = p.log_text(
        "token=abc123 to redis://u:pw@host/0 nul\x00", "warning", redaction=Redaction(("token",))
    )
    assert masked == "warning: token=*** to redis://***@host/0 nul"


def test_the_first_value_is_written_at_once_then_one_per_interval() -> None:
    c = Coalescer(interval_s=0.5)
    assert c.offer((1, "a"), now=10.0) == (1, "a")
    c.sent((1, "a"), 10.0, written=True)
    assert c.offer((2, None), now=10.1) is None  # held back; keeps stage "a"
    assert c.offer((3, None), now=10.2) is None
    assert c.pending == (3, "a") and c.next_due() == 10.5
    assert c.due(10.49) is None
    assert c.due(10.5) == (3, "a")
    c.sent((3, "a"), 10.5, written=True)
    assert c.pending is None and c.next_due() is None
    assert c.offer((3, "a"), now=20.0) is None  # the same value again: nothing to write
    assert c.offer((4, "b"), now=20.0) == (4, "b")  # due: the interval has passed


def test_the_newest_value_replaces_a_pending_one_and_a_failed_write_stays_pending() -> None:
    c = Coalescer(interval_s=1.0)
    c.sent(c.offer((10, None), 0.0) or (0, None), 0.0, written=True)
    c.offer((20, "x"), 0.2)
    c.offer((30, None), 0.3)
    assert c.pending == (30, "x")
    c.sent((30, "x"), 1.0, written=False)  # the database failed
    assert c.pending == (30, "x") and c.due(1.5) is None and c.due(2.0) == (30, "x")
    c.offer((40, None), 1.2)  # a value written meanwhile by another call is not lost
    assert c.pending == (40, "x")


def test_interval_zero_writes_every_change() -> None:
    c = Coalescer(interval_s=0.0)
    for n in range(5):
        value = c.offer((n, None), now=1.0)
        assert value == (n, None)
        c.sent(value, 1.0, written=True)
