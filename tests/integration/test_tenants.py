"""Tenants (issue 27, item 2): the ``tenant`` column, ``{tenant}`` in keys, the filter of
``Tracker.jobs`` and the CLI, and seed 004's ``required`` rule refusing a call before
anything is written. PostgreSQL and SQLite, real Redis as broker and guard."""

from __future__ import annotations

import json
import types
import warnings

import pytest
import redis
from click.testing import CliRunner

from celery_tracked import RateLimit, TrackedTask, tracked_task
from celery_tracked.cli import tracked
from celery_tracked.errors import InvalidPayload, InvalidTaskOption, MissingRequired

from .conftest import AppFactory, guard_keys, queue_messages, tracker_of
from .test_enqueue import row_count

QUEUE = "tenants_q"


def test_a_job_records_its_tenant_and_is_found_by_it(make_app: AppFactory) -> None:
    app = make_app()

    @tracked_task(
        app=app,
        shared=False,
        queue=QUEUE,
        tenant="{tenant_id}",
        concurrency_key="ai:{tenant}",
        idempotency_key="{tenant}:{doc}",
        rate_limits=RateLimit("ai:{tenant}", "5/s", burst=2, units="pages"),
    )
    def ocr(tenant_id: str, doc: str, pages: int = 1) -> None: ...

    tracker = tracker_of(app)
    a = ocr.enqueue("acme", "d1")
    b = ocr.enqueue(tenant_id="globex", doc="d1", pages=2)
    untracked = ocr.enqueue("acme", "d2")
    job = tracker.get_job(a.job_id)
    assert job is not None and job.tenant == "acme"
    assert job.concurrency_key == "ai:acme" and job.idempotency_key == "acme:d1"
    found = tracker.jobs(tenant="acme").jobs
    assert {j.id for j in found} == {a.job_id, untracked.job_id}
    assert [j.id for j in tracker.jobs(tenant="globex").jobs] == [b.job_id]
    assert tracker.jobs(tenant="nobody").jobs == ()
    with pytest.raises(InvalidPayload, match="units"):
        ocr.enqueue("acme", "d3", pages=3)  # more than the burst: never runs
    obj = types.SimpleNamespace(app=app)
    out = CliRunner().invoke(tracked, ["jobs", "--tenant", "globex", "--json"], obj=obj)
    assert out.exit_code == 0, out.output
    assert [j["id"] for j in json.loads(out.output)["jobs"]] == [b.job_id]
    shown = CliRunner().invoke(tracked, ["show", a.job_id], obj=obj)
    assert "acme" in shown.output


def test_a_call_missing_a_required_field_is_refused_before_anything_is_written(
    make_app: AppFactory, broker: redis.Redis, database_url: str
) -> None:
    app = make_app()

    @tracked_task(
        app=app,
        shared=False,
        queue=QUEUE,
        tenant="{tenant_id}",
        required=("tenant_id", "correlation_id", "idempotency_key"),
    )
    def charge(tenant_id: str | None = None, amount: int = 0) -> None: ...

    before = row_count(database_url)
    refusals = [
        lambda: charge.enqueue(None, 5, _correlation_id="c-1", _idempotency_key="k-1"),
        lambda: charge.enqueue("acme", 5, _idempotency_key="k-2"),  # no correlation id
        lambda: charge.enqueue("acme", 5, _correlation_id="c-3"),  # no key
        lambda: charge.apply_async(("", 5), correlation_id="c", idempotency_key="k-4"),
        lambda: charge.delay("acme", 5),
    ]
    missing = []
    for refuse in refusals:
        with pytest.raises(MissingRequired) as refused:
            refuse()
        assert isinstance(refused.value, InvalidPayload)
        missing.append(refused.value.missing)
    assert missing == [
        ("tenant_id",),
        ("correlation_id",),
        ("idempotency_key",),
        ("tenant_id",),
        ("correlation_id", "idempotency_key"),
    ]
    assert row_count(database_url) == before  # no row
    assert queue_messages(broker, QUEUE) == []  # no message
    assert guard_keys(broker) == []  # no guard key
    ok = charge.enqueue("acme", 5, _correlation_id="c-5", _idempotency_key="k-5")
    job = tracker_of(app).get_job(ok.job_id)
    assert job is not None and job.tenant == "acme" and job.correlation_id == "c-5"


def test_the_options_are_checked_when_the_task_is_declared(make_app: AppFactory) -> None:
    app = make_app()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no DeprecationWarning at decoration either
        for bad in (
            {"tenant": "{tenant.id}"},
            {"required": "tenant_id"},
            {"required": ("tenant id",)},
            {"rate_limits": ("ai", "20/fortnight")},
        ):
            with pytest.raises(InvalidTaskOption):

                @tracked_task(app=app, shared=False, **bad)
                def nope(tenant_id: str) -> None: ...

        @app.task(base=TrackedTask, shared=False, rate_limit_global=("ai", 100))
        def old_spelling(tenant_id: str) -> None: ...  # the global limiter keeps working
