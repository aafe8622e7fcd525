"""Finding jobs, pure: the filters, the keyset cursor, pages, the bulk walk, and the SQL a
filter builds (``finder.py``, ``bulk.act``, ``store/reads.py``)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy.dialects import mysql, postgresql, sqlite

from celery_tracked.core.bulk import BulkReport
from celery_tracked.core.errors import InvalidFilter, TrackedError
from celery_tracked.core.finder import (
    JobFilter,
    Position,
    check_limit,
    decode_cursor,
    encode_cursor,
    page_of,
    parse_statuses,
)
from celery_tracked.core.jobs import Job, JobStatus
from celery_tracked.services.bulk import act
from celery_tracked.store import reads as queries

from .job_rows import NOW, a_job

UTC = timezone.utc


def test_statuses_one_or_several_names_or_members_in_order_without_repeats() -> None:
    assert parse_statuses(None) == ()
    assert parse_statuses("failed") == (JobStatus.FAILED,)
    assert parse_statuses(JobStatus.PENDING) == (JobStatus.PENDING,)
    assert parse_statuses(["failed", " Cancelled", JobStatus.FAILED]) == (
        JobStatus.FAILED,
        JobStatus.CANCELLED,
    )
    assert parse_statuses(("pending",)) == (JobStatus.PENDING,)


@pytest.mark.parametrize("bad", ["done", ["failed", "nope"], [3], 3, [None], [], ()])
def test_an_unknown_status_is_refused_with_the_known_ones(bad: Any) -> None:
    with pytest.raises(InvalidFilter) as caught:
        parse_statuses(bad)
    assert isinstance(caught.value, TrackedError) and isinstance(caught.value, ValueError)


def test_a_filter_of_keywords_resolves_timedeltas_from_now_and_keeps_aware_datetimes() -> None:
    at = datetime(2030, 1, 1, 14, 0, tzinfo=timezone(timedelta(hours=2)))
    filt = JobFilter.of(
        status=["failed", "cancelled"],
        queue="emails",
        owner_id="u-1",
        created_after=timedelta(hours=1),
        created_before=at,
        now=NOW,
    )
    assert filt.statuses == (JobStatus.FAILED, JobStatus.CANCELLED)
    assert filt.created_after == NOW - timedelta(hours=1)
    assert filt.created_before == datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
    assert filt.as_dict() == {
        "status": ["failed", "cancelled"],
        "queue": "emails",
        "owner_id": "u-1",
        "created_after": "2030-01-01T11:00:00+00:00",
        "created_before": "2030-01-01T12:00:00+00:00",
    }
    assert not filt.empty and JobFilter.of().empty


@pytest.mark.parametrize(
    "kwargs",
    [
        {"created_after": datetime(2030, 1, 1)},  # naive: ambiguous
        {"finished_before": "yesterday"},
        {"created_after": timedelta(hours=-1)},
        {"created_after": NOW, "created_before": NOW},  # empty range
        {"finished_after": NOW, "finished_before": NOW - timedelta(seconds=1)},
        {"queue": ""},
        {"queue": 3},
        {"owner_id": "a\x00b"},
        {"job_type": "x" * 256},
    ],
)
def test_bad_filters_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidFilter):
        JobFilter.of(now=NOW, **kwargs)


def test_a_bulk_action_takes_its_default_statuses_and_refuses_others() -> None:
    allowed = (JobStatus.FAILED, JobStatus.CANCELLED)
    assert JobFilter.of().restricted_to(allowed, "retry", (JobStatus.FAILED,)).statuses == (
        JobStatus.FAILED,
    )
    assert JobFilter.of().restricted_to(allowed, "retry").statuses == allowed
    given = JobFilter.of(status="cancelled", queue="q")
    assert given.restricted_to(allowed, "retry") == given
    with pytest.raises(InvalidFilter, match="retry acts on failed, cancelled jobs only, not"):
        JobFilter.of(status=["failed", "completed"]).restricted_to(allowed, "retry")


def test_a_cursor_is_opaque_and_round_trips_its_position() -> None:
    position = Position(datetime(2030, 1, 1, 12, 0, 0, 123456, tzinfo=UTC), "job-7")
    token = encode_cursor(position)
    assert "job-7" not in token and "=" not in token
    assert decode_cursor(token) == position


@pytest.mark.parametrize(
    "token",
    [
        "",
        "garbage!",
        None,
        42,
        encode_cursor(Position(NOW, "x")).replace("M", "Z", 1),  # a different version
        "MnwyMDMwLTAxLTAxVDEyOjAwOjAwKzAwOjAwfHg",  # version 2
        "MXwyMDMwLTAxLTAxVDEyOjAwOjAwfHg",  # a naive time
        "x" * 300,
    ],
)
def test_a_cursor_this_library_did_not_make_is_refused(token: Any) -> None:
    with pytest.raises(InvalidFilter, match="cursor"):
        decode_cursor(token)


def test_a_page_has_a_next_cursor_only_when_one_more_row_was_read() -> None:
    rows = [a_job(id=f"j{i}", created_at=NOW - timedelta(seconds=i)) for i in range(4)]
    last = page_of(rows[:3], 3)
    assert last.jobs == tuple(rows[:3]) and last.next_cursor is None
    page = page_of(rows, 3)
    assert list(page) == rows[:3] and len(page) == 3
    assert page.next_cursor is not None
    assert decode_cursor(page.next_cursor) == Position(rows[2].created_at, "j2")


@pytest.mark.parametrize("limit", [0, -1, 1001, True, 2.5, "10", None])
def test_a_bad_page_size_is_refused(limit: Any) -> None:
    with pytest.raises(InvalidFilter, match="limit"):
        check_limit(limit)


def test_a_bulk_limit_has_no_maximum() -> None:
    assert check_limit(50_000, None) == 50_000


class FakeStore:
    """``find`` over a list, newest first by (created_at, id), like ``Queries.find``."""

    def __init__(self, jobs: list[Job]) -> None:
        self.jobs = sorted(jobs, key=lambda j: (j.created_at, j.id), reverse=True)
        self.reads: list[int] = []

    def find(self, filt: JobFilter, after: Position | None, limit: int) -> list[Job]:
        self.reads.append(limit)
        rows = [j for j in self.jobs if not filt.statuses or j.status in filt.statuses]
        if after is not None:
            rows = [j for j in rows if (j.created_at, j.id) < (after.created_at, after.id)]
        return rows[:limit]


def test_the_bulk_walk_acts_on_each_job_once_newest_first_up_to_the_limit() -> None:
    # ties in created_at: the id breaks them
    jobs = [a_job(id=f"j{i:03}", created_at=NOW - timedelta(seconds=i // 3)) for i in range(450)]
    store = FakeStore(jobs)
    seen: list[str] = []

    def one(job: Job) -> str | None:
        seen.append(job.id)
        return "nope" if job.id.endswith("7") else None

    report = act(store.find, JobFilter(), 420, "retry", one)
    assert seen == [j.id for j in store.jobs[:420]]
    assert len(set(seen)) == 420
    assert report.more is True and report.matched == 420
    assert set(report.refused) == {i for i in seen if i.endswith("7")}
    assert set(report.changed) == {i for i in seen if not i.endswith("7")}
    assert store.reads == [201, 201, 21]  # pages of 200, each reading one more

    everything = act(FakeStore(jobs).find, JobFilter(), 1000, "cancel", lambda job: None)
    assert everything.matched == 450 and everything.more is False


def test_the_bulk_walk_continues_after_its_jobs_left_the_filter() -> None:
    """Acting moves a job out of the filter (failed → pending): the keyset still goes on
    after it, never back to the start."""
    jobs = [
        a_job(id=f"j{i:03}", status=JobStatus.FAILED, created_at=NOW - timedelta(seconds=i))
        for i in range(300)
    ]
    store = FakeStore(jobs)
    by_id = {j.id: j for j in store.jobs}

    def one(job: Job) -> str | None:
        moved = by_id[job.id].__class__(**{**job.__dict__, "status": JobStatus.PENDING})
        store.jobs[store.jobs.index(by_id[job.id])] = moved
        return None

    report = act(store.find, JobFilter(statuses=(JobStatus.FAILED,)), 1000, "retry", one)
    assert len(report.changed) == 300 and len(set(report.changed)) == 300


def test_a_bulk_report_as_a_dict_has_stable_keys() -> None:
    report = BulkReport("cancel", ("a", "b"), {"c": "it is completed"}, more=True)
    assert report.as_dict() == {
        "action": "cancel",
        "matched": 3,
        "changed": ["a", "b"],
        "refused": {"c": "it is completed"},
        "skipped": {},
        "more": True,
    }


def _sql(filt: JobFilter, after: Position | None = None, dialect: Any = None) -> str:
    statement = queries.find_statement(filt, after, 51)
    compiled = statement.compile(
        dialect=dialect or postgresql.dialect(), compile_kwargs={"render_postcompile": True}
    )
    return " ".join(str(compiled).split())


def test_a_filter_builds_one_indexed_condition_per_field() -> None:
    sql = _sql(
        JobFilter.of(
            status="failed",
            queue="q",
            job_type="t",
            task_name="app.t",
            correlation_id="c",
            owner_id="o",
            error_type="E",
            created_after=NOW - timedelta(days=1),
            created_before=NOW,
            finished_after=NOW - timedelta(hours=1),
            finished_before=NOW,
            now=NOW,
        )
    )
    where = sql.split(" WHERE ")[1].split(" ORDER BY ")[0]
    assert where.split(" AND ") == [
        "background_jobs.status = %(status_1)s::VARCHAR",
        "background_jobs.queue_name = %(queue_name_1)s::VARCHAR",
        "background_jobs.job_type = %(job_type_1)s::VARCHAR",
        "background_jobs.task_name = %(task_name_1)s::VARCHAR",
        "background_jobs.correlation_id = %(correlation_id_1)s::VARCHAR",
        "background_jobs.owner_id = %(owner_id_1)s::VARCHAR",
        "background_jobs.error_type = %(error_type_1)s::VARCHAR",
        "background_jobs.created_at >= %(created_at_1)s::TIMESTAMP WITH TIME ZONE",
        "background_jobs.created_at < %(created_at_2)s::TIMESTAMP WITH TIME ZONE",
        "background_jobs.finished_at >= %(finished_at_1)s::TIMESTAMP WITH TIME ZONE",
        "background_jobs.finished_at < %(finished_at_2)s::TIMESTAMP WITH TIME ZONE",
    ]
    assert sql.endswith(
        "ORDER BY background_jobs.created_at DESC, background_jobs.id DESC "
        "LIMIT %(param_1)s::INTEGER"
    )


def test_several_statuses_are_one_in_list_and_no_filter_is_no_where() -> None:
    assert "background_jobs.status IN (%(status_1_1)s::VARCHAR, %(status_1_2)s::VARCHAR)" in _sql(
        JobFilter.of(status=["failed", "cancelled"])
    )
    assert " WHERE " not in _sql(JobFilter())


@pytest.mark.parametrize("dialect", [postgresql.dialect(), sqlite.dialect(), mysql.dialect()])
def test_the_keyset_is_a_plain_range_on_created_at_then_the_tie_break(dialect: Any) -> None:
    sql = _sql(JobFilter(), Position(NOW, "j"), dialect)
    where = sql.split(" WHERE ")[1].split(" ORDER BY ")[0]
    assert where.startswith("background_jobs.created_at <= ")
    assert " AND (background_jobs.created_at < " in where
    assert " OR background_jobs.id < " in where
    assert queries.find_params(Position(NOW, "j")) == {
        "after_created_at": NOW,
        "after_id": "j",
    }


def test_a_filter_matches_a_job_as_the_stores_conditions_do() -> None:
    failed = a_job(status=JobStatus.FAILED, queue_name="mail", finished_at=NOW)
    pending = a_job(queue_name="mail")
    assert JobFilter().matches(failed) and JobFilter().matches(pending)
    assert JobFilter.of(status="failed", queue="mail").matches(failed)
    assert not JobFilter.of(status="failed").matches(pending)
    assert not JobFilter.of(queue="ocr").matches(failed)
    since = JobFilter.of(finished_after=NOW - timedelta(seconds=1))
    assert since.matches(failed) and not since.matches(pending)  # NULL is in no range
    assert not JobFilter.of(finished_before=NOW).matches(failed)  # the upper bound excludes
    assert JobFilter.of(created_after=NOW).matches(pending)  # the lower bound includes
