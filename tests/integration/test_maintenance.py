"""Each maintenance pass records its plugin's row (``background_job_maintenance``, one
upsert): a real pass its counts on the database's clock, a failing pass its masked error,
and a failure to record never fails the pass (issue 28). PostgreSQL and SQLite, real
Redis."""

from __future__ import annotations

import json
import logging
from datetime import timedelta

import pytest

from celery_tracked import Tracker
from celery_tracked.adapter.beat import REAP_TASK
from celery_tracked.core.errors import StoreError
from celery_tracked.core.jobs import utcnow
from celery_tracked.core.maintenance import MaintenanceRun
from celery_tracked.store import JobStore

from .conftest import AppFactory, insert_job, tracker_of

pytestmark = pytest.mark.filterwarnings("ignore::celery.exceptions.DuplicateTaskNameWarning")

SECRET = "hunter2-maintenance"


def ran(tracker: Tracker) -> list[MaintenanceRun]:
    """The plugins with a recorded pass (``Tracker.maintenance()`` lists every plugin)."""
    return [run for run in tracker.maintenance() if run.ran]


def test_a_real_pass_records_its_row(make_app: AppFactory) -> None:
    tracker = tracker_of(make_app())
    store = tracker._services.store
    assert isinstance(store, JobStore)
    insert_job(store)  # a producer that died before its publish
    report = tracker.relay(now=utcnow() + timedelta(hours=1))
    moved = len(report.published) + len(report.cancelled)
    [run] = ran(tracker)
    assert (run.name, run.passes, run.failures, run.failed) == ("relay", 1, 0, False)
    assert run.counts == {k: len(v) for k, v in report.as_dict().items()}
    assert sum(run.counts.values()) == 1 and (run.jobs, run.jobs_total) == (moved, moved)
    assert run.ended_at is not None and run.age_s is not None and run.age_s < 30
    assert run.started_at is not None and run.started_at <= run.ended_at
    assert (run.every_s, run.stale) == (tracker.settings.relay_interval_seconds, False)
    tracker.relay()  # nothing to do: the totals add up, the last pass replaced
    [run] = ran(tracker)
    assert (run.passes, run.jobs, run.jobs_total) == (2, 0, moved)


def test_the_beat_task_records_its_pass(make_app: AppFactory) -> None:
    app = make_app()
    app.finalize()
    app.tasks[REAP_TASK]()  # the Beat task's body, in process
    [run] = ran(tracker_of(app))
    assert (run.name, run.passes, run.failed) == ("reap", 1, False)
    assert set(run.counts) == {"rescued", "abandoned", "left", "unpublished", "cancelled"}


def test_a_failing_pass_records_failed_with_its_error_masked(
    make_app: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    tracker = tracker_of(make_app())
    store = tracker._services.store

    def broken(**_: object) -> list[str]:
        raise StoreError(f"lost postgresql://ops:{SECRET}@db:5432/jobs")

    monkeypatch.setattr(store, "unpublished", broken)
    with pytest.raises(StoreError):
        tracker.run_maintenance("relay")
    [run] = ran(tracker)
    assert (run.failed, run.passes, run.failures, run.counts) == (True, 1, 1, {})
    assert run.error is not None and run.error.startswith("StoreError: lost postgresql://")
    assert SECRET not in run.error and "***" in run.error


def test_a_failure_to_record_never_fails_the_pass(
    make_app: AppFactory, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    tracker = tracker_of(make_app())
    store = tracker._services.store

    def unrecorded(_: object) -> None:
        raise StoreError("no table background_job_maintenance")

    monkeypatch.setattr(store, "record_maintenance", unrecorded)
    with caplog.at_level(logging.WARNING, logger="celery_tracked"):
        tracker.reap()
        tracker.reap()  # its report all the same; said once
    said = [r for r in caplog.records if "could not record the reap pass" in r.getMessage()]
    assert len(said) == 1
    monkeypatch.undo()
    tracker.reap()
    assert [run.name for run in ran(tracker)] == ["reap"]


def test_the_cli_shows_each_plugins_last_pass(
    make_app: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from celery.bin.base import CLIContext
    from click.testing import CliRunner

    from celery_tracked.cli import tracked

    app = make_app()
    tracker = tracker_of(app)
    tracker.reap()
    monkeypatch.setattr(
        tracker._services.store,
        "unpublished",
        lambda **_: (_ for _ in ()).throw(StoreError(f"lost redis://:{SECRET}@cache/0")),
    )
    with pytest.raises(StoreError):
        tracker.relay()
    context = CLIContext(app=app, no_color=True, workdir=None)

    def run(*args: str) -> str:
        result = CliRunner().invoke(tracked, list(args), obj=context, catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.stdout

    shown = json.loads(run("maintenance", "--json"))["maintenance"]
    by_name = {entry["name"]: entry for entry in shown}
    assert list(by_name) == ["relay", "schedule", "reap", "cleanup", "probe"]
    assert by_name["reap"]["ran"] and not by_name["reap"]["failed"]
    assert by_name["reap"]["passes"] == 1 and by_name["reap"]["stale"] is False
    assert by_name["relay"]["failed"] and not by_name["schedule"]["ran"]
    out = run("maintenance")
    assert "PLUGIN" in out and "never" in out and "relay failed: StoreError: lost" in out
    assert SECRET not in out and SECRET not in json.dumps(shown)
