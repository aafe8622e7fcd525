"""The CLI's pure parts: relative times, durations, aligned tables, colour rules, time
options, filters from options, and the JSON form of a job (never payload or result)."""

from __future__ import annotations

import io
from datetime import datetime, timedelta, timezone
from typing import Any

import click
import pytest

from celery_tracked.cli.common import filters_from, parse_time
from celery_tracked.cli.render import (
    Style,
    clip,
    duration,
    job_dict,
    job_rows,
    relative,
    table,
)
from celery_tracked.core.jobs import JobStatus

from .job_rows import NOW, a_job


@pytest.mark.parametrize(
    ("delta", "shown"),
    [
        (timedelta(seconds=0), "0s ago"),
        (timedelta(seconds=59), "59s ago"),
        (timedelta(minutes=3, seconds=10), "3m ago"),
        (timedelta(hours=5, minutes=59), "5h ago"),
        (timedelta(days=2, hours=23), "2d ago"),
        (timedelta(days=29), "29d ago"),
        (timedelta(days=31), "2029-12-01"),
        (timedelta(seconds=-30), "in 30s"),
    ],
)
def test_relative_times(delta: timedelta, shown: str) -> None:
    assert relative(NOW - delta, NOW) == shown


def test_relative_of_nothing_and_durations() -> None:
    assert relative(None, NOW) == "-"
    assert [duration(s) for s in (None, 0.85, 12.34, 245, 7380)] == [
        "-",
        "850ms",
        "12.3s",
        "4m 05s",
        "2h 03m",
    ]


def test_clip_keeps_one_line() -> None:
    assert clip(None, 10) == "" and clip("a\n  b", 10) == "a b"
    assert clip("x" * 20, 10) == "x" * 9 + "…"


def test_a_table_aligns_on_the_text_and_paints_after_padding() -> None:
    rows: list[list[Any]] = [
        ["a", ("failed", "failed"), "x"],
        ["bbbb", ("ok", "completed"), "long text"],
    ]
    plain = table(("ID", "STATUS", "NOTE"), rows, Style(False))
    assert plain.splitlines() == [
        "ID    STATUS  NOTE",
        "a     failed  x",
        "bbbb  ok      long text",
    ]
    painted = table(("ID", "STATUS", "NOTE"), rows, Style(True))
    assert "\x1b[31mfailed\x1b[0m  x" in painted  # red
    assert "\x1b[32mok    \x1b[0m  long text" in painted  # green, padded inside the colour
    assert painted.splitlines()[0].startswith("\x1b[1mID  ")  # bold headers


class _Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty


@pytest.mark.parametrize(
    ("tty", "environ", "colour"),
    [
        (True, {}, True),
        (False, {}, False),
        (True, {"NO_COLOR": "1"}, False),
        (True, {"NO_COLOR": ""}, True),  # no-color.org: set and not empty
        (True, {"TERM": "dumb"}, False),
    ],
)
def test_colour_only_on_a_terminal_without_no_color(
    tty: bool, environ: dict[str, str], colour: bool
) -> None:
    assert Style.for_stream(_Stream(tty), environ).colour is colour


def test_time_options_are_durations_ago_or_iso_dates() -> None:
    assert parse_time(None) is None
    assert parse_time("90s") == timedelta(seconds=90)
    assert parse_time("15m") == timedelta(minutes=15)
    assert parse_time("2h") == timedelta(hours=2)
    assert parse_time("1.5d") == timedelta(hours=36)
    assert parse_time("1w") == timedelta(days=7)
    assert parse_time("2030-01-02") == datetime(2030, 1, 2, tzinfo=timezone.utc)
    offset = timezone(timedelta(hours=2))
    assert parse_time("2030-01-02T10:00:00+02:00") == datetime(2030, 1, 2, 10, tzinfo=offset)
    for bad in ("yesterday", "2h ago", "-1h", "10x"):
        with pytest.raises(click.BadParameter):
            parse_time(bad)


def test_filters_from_options_keep_only_those_given() -> None:
    options = {
        "status": ("failed,cancelled", "pending"),
        "queue": "q",
        "job_type": None,
        "task_name": None,
        "correlation_id": None,
        "owner_id": "u",
        "error_type": None,
        "created_after": "2h",
        "created_before": None,
        "finished_after": None,
        "finished_before": "2030-01-01",
    }
    assert filters_from(options) == {
        "status": ["failed", "cancelled", "pending"],
        "queue": "q",
        "owner_id": "u",
        "created_after": timedelta(hours=2),
        "finished_before": datetime(2030, 1, 1, tzinfo=timezone.utc),
    }
    assert filters_from({"status": ()}) == {}


def test_the_json_form_of_a_job_never_holds_its_payload_or_result() -> None:
    job = a_job(
        status=JobStatus.FAILED,
        attempts_made=2,
        error_type="ValueError",
        error_message="bad",
        payload_json='{"args": ["payload-canary"], "kwargs": {}}',
        result_json='"result-canary"',
        finished_at=NOW + timedelta(seconds=3),
        started_at=NOW,
    )
    out = job_dict(job)
    assert "canary" not in repr(out)
    assert out["attempts"] == "2/3" and out["error"] == "ValueError: bad"
    assert out["duration_ms"] == 3000 and out["created_at"] == NOW.isoformat()
    assert set(out) >= {"id", "status", "queue", "job_type", "cancel_requested_at"}
    row = job_rows([job], NOW + timedelta(minutes=5))[0]
    assert (
        row[1] == ("failed", "failed")
        and row[6] == "5m ago"
        and row[7] == "-"
        and row[8] == "4m ago"
    )  # DUE: none
    assert row[4] == "-" and out["priority"] is None  # no priority: the broker's default
