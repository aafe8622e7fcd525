"""Issue 26, the new-user trial's findings on scheduling and control, on the in-memory
store (no service): each error names what the caller gave and says what is allowed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import click
import pytest
from celery import Celery

from celery_tracked import (
    InvalidPause,
    InvalidPayload,
    InvalidPriority,
    InvalidTaskOption,
    JobStatus,
    RetryRefused,
    Tracker,
    tracked_task,
)
from celery_tracked.backends.memory import MemoryStore
from celery_tracked.core.jobs import utcnow

pytestmark = pytest.mark.filterwarnings("ignore::celery.exceptions.DuplicateTaskNameWarning")


@pytest.fixture
def app() -> Iterator[Celery]:
    app = Celery("trial", broker="memory://", set_as_current=False)
    app.conf.update(
        tracked_database_url="memory://",
        tracked_redis_url="memory://",
        tracked_schedule_horizon_seconds=300,
    )
    yield app


def _task(app: Celery, name: str = "trial.remind", **options: Any) -> Any:
    @tracked_task(app=app, shared=False, name=name, **options)
    def remind(who: str) -> str:
        return who

    return remind


def test_a_deadline_error_names_the_option_the_caller_gave(app: Celery) -> None:
    remind = _task(app, deadline=timedelta(minutes=5))
    tracker = Tracker.for_app(app)
    with pytest.raises(InvalidPayload) as own:  # the task's option, not the call's
        remind.apply_async(args=("a",), countdown=3600)
    assert "the task's deadline option of trial.remind" in str(own.value)
    assert "_deadline" not in str(own.value)
    with pytest.raises(InvalidPayload, match=r"^deadline must be a positive span"):
        remind.with_options(deadline=-3)("a")
    with pytest.raises(InvalidPayload, match=r"^deadline must be a positive span"):
        remind.apply_async(args=("a",), deadline=-3)
    with pytest.raises(InvalidPayload, match=r"^_deadline must be a positive span"):
        remind.apply_async(args=("a",), _deadline=-3)
    with pytest.raises(InvalidPayload, match=r"^_deadline must be a positive span"):
        remind.enqueue("a", _deadline=-3)
    with pytest.raises(InvalidPayload, match=r"^deadline \(.*\) is not after the job's due"):
        remind.with_options(deadline=60, options={"countdown": 3600})("a")
    assert tracker.jobs().jobs == ()


def test_a_refused_pause_says_what_was_wrong_and_what_is_allowed(app: Celery) -> None:
    _task(app)
    tracker = Tracker.for_app(app)
    with pytest.raises(InvalidPause) as two:
        tracker.pause(queue="celery", job_type="trial.remind")
    assert "got queue='celery' and job_type='trial.remind'" in str(two.value)
    assert "give queue='NAME', job_type='NAME' or everything=True" in str(two.value)
    with pytest.raises(InvalidPause, match=r"resume takes exactly one scope, got none"):
        tracker.resume()
    with pytest.raises(InvalidPause, match=r"the job type must be a name of 1 to 255 .*got ''"):
        tracker.pause(job_type="")
    with pytest.raises(InvalidPause, match=r"got 300 characters"):
        tracker.pause(queue="q" * 300)
    with pytest.raises(InvalidPause, match=r"reason must be at most 2000 characters, got 2500"):
        tracker.pause(queue="celery", reason="x" * 2500)
    with pytest.raises(InvalidPause, match=r"by must be text .*got a int"):
        tracker.pause(queue="celery", by=5)  # type: ignore[arg-type]
    with pytest.raises(InvalidPause) as unknown:
        tracker.pause(queue="nope")
    assert str(unknown.value).startswith("cannot pause unknown queue 'nope'")
    known = str(unknown.value).split("pause one of the known ones (")[1]  # shared tasks too
    assert "celery" in known.split(")")[0] and known.endswith("), or everything")
    with pytest.raises(InvalidPause, match=r"^cannot resume unknown job type 'nope'") as job_type:
        tracker.resume(job_type="nope")
    assert "not the job type of a tracked task registered here;" in str(job_type.value)
    assert "the app's the" not in str(job_type.value)  # the issue 26 trial: it read so
    assert tracker.paused() == []


def test_the_cli_names_its_own_flags_for_a_bad_scope(app: Celery) -> None:
    from celery_tracked.cli.pauses import _scope

    with pytest.raises(click.UsageError, match=r"--queue NAME, --job-type NAME or --all"):
        _scope("a", None, True)
    with pytest.raises(click.UsageError, match=r"\(got none\)"):
        _scope(None, None, False)
    assert _scope(None, "x", False)["job_type"] == "x"


def test_the_due_filters_say_their_format_and_clock() -> None:
    from celery_tracked.cli.common import filters_from
    from celery_tracked.cli.listing import jobs

    helps = {p.name: getattr(p, "help", "") or "" for p in jobs.params}
    for name in ("due_before", "due_after"):
        assert "a duration from now on the database's clock (30m, 2h, 3d" in helps[name]
        assert "ISO 8601 date/time" in helps[name] and "no zone: UTC" in helps[name]
    assert filters_from({"due_before": "in 2h"})["due_before"] == timedelta(hours=2)
    assert filters_from({"due_after": "90s"})["due_after"] == timedelta(seconds=90)
    with pytest.raises(click.BadParameter, match=r"give a duration from now \(90s"):
        filters_from({"due_before": "tomorrow"})
    with pytest.raises(click.BadParameter, match=r"give a duration ago \(90s"):
        filters_from({"created_before": "in 2h"})


def _store(tracker: Tracker) -> MemoryStore:
    store = tracker._services.store
    assert isinstance(store, MemoryStore)
    return store


def _held_by_a_pause(app: Celery) -> tuple[Tracker, str]:
    """A job whose delivery a pause of its job type held in the database (the worker's
    gate: the ``HOLD`` move, as ``tests/unit/test_pauses.py`` drives it)."""
    remind = _task(app)
    tracker = Tracker.for_app(app)
    job_id = remind.enqueue("a").job_id
    tracker.pause(job_type="trial.remind", reason="provider down", by="ops")
    assert _store(tracker).hold(job_id, 0, now=utcnow(), message="held: a pause")
    return tracker, job_id


def test_a_job_a_pause_held_says_so_when_published_on_resume(app: Celery) -> None:
    tracker, job_id = _held_by_a_pause(app)
    assert tracker.resume(job_type="trial.remind")
    job = tracker.get_job(job_id)
    assert job is not None and job.published_at is not None  # sent on resume
    last = tracker.history(job_id)[-1]
    assert last.event == "relayed"
    assert "held in the database by a pause" in (last.message or "")
    assert "producer never handed it" not in (last.message or "")


def _cli(app: Celery, *args: str) -> str:
    from celery.bin.base import CLIContext
    from click.testing import CliRunner

    from celery_tracked.cli import tracked

    context = CLIContext(app=app, no_color=True, workdir=None)
    out = CliRunner().invoke(tracked, list(args), obj=context, catch_exceptions=False)
    assert out.exit_code == 0, out.output
    return out.stdout


def test_show_says_a_job_is_held_by_a_pause_and_by_whom(app: Celery) -> None:
    tracker, job_id = _held_by_a_pause(app)
    shown = _cli(app, "show", job_id, "--no-history")
    held = next(line for line in shown.splitlines() if line.startswith("held"))
    assert "by a pause (job type 'trial.remind' paused by ops since" in held
    assert "provider down" in held and "published on resume" in held
    assert "scheduler pass" not in shown
    assert "by a pause (job type" in json.loads(_cli(app, "show", job_id, "--json"))["held"]
    tracker.pause(everything=True)
    _store(tracker).resume("job_type", "trial.remind")  # lifted, another pause still covers it
    assert "by a pause (everything paused by" in _cli(app, "show", job_id)


def test_show_says_a_scheduled_job_is_held_until_its_due_time(app: Celery) -> None:
    remind = _task(app)
    far = remind.apply_async(args=("a",), countdown=7200)
    shown = _cli(app, "show", far.id, "--no-history")
    due = next(line for line in shown.splitlines() if line.startswith("due"))
    job = Tracker.for_app(app).get_job(far.id)
    assert job is not None and job.not_before is not None
    assert job.not_before.isoformat() in due and "held: published by the scheduler pass" in due
    assert json.loads(_cli(app, "show", far.id, "--json"))["held"] == (
        "published by the scheduler pass"
    )


def test_show_says_a_scheduled_job_a_pause_covers_waits_for_the_pause(app: Celery) -> None:
    """A job held until its due time whose type is paused is not published by the next
    scheduler pass: ``show`` names the pause (the issue 26 trial: it said only "published
    by the scheduler pass", overdue)."""
    remind = _task(app)
    tracker = Tracker.for_app(app)
    far = remind.apply_async(args=("a",), countdown=7200)
    tracker.pause(job_type="trial.remind", reason="provider down", by="ops")
    due = next(line for line in _cli(app, "show", far.id).splitlines() if line.startswith("due"))
    assert "held: published by the scheduler pass once resumed" in due
    assert "(job type 'trial.remind' paused by ops since" in due and "provider down" in due
    assert "once resumed" in json.loads(_cli(app, "show", far.id, "--json"))["held"]


def test_the_due_time_has_one_public_name_and_a_column(app: Celery) -> None:
    remind = _task(app)
    tracker = Tracker.for_app(app)
    far = remind.apply_async(args=("a",), countdown=7200)
    now = remind.enqueue("b")
    job = tracker.get_job(far.id)
    assert job is not None and job.due_at is not None and job.due_at == job.not_before
    listing = _cli(app, "jobs").splitlines()
    header = listing[0].split()
    assert header[header.index("CREATED") + 1] == "DUE"
    rows = {line.split()[0]: line for line in listing[1:]}
    due = listing[0].index("DUE")
    assert rows[far.id][due:].split()[:2] == ["in", "1h"]  # 1h 59m 59s ahead
    assert rows[now.job_id][due:].split()[0] == "-"
    assert json.loads(_cli(app, "jobs", "--json"))["jobs"][-1]["due_at"] == job.due_at.isoformat()


@pytest.mark.parametrize("bad", [-1, 10, 256, 1000, True, False, 5.0, "5", None.__class__])
def test_every_bad_call_priority_is_invalid_priority_before_anything_is_written(
    app: Celery, bad: Any
) -> None:
    """The memory transport is a kombu virtual transport: 0-9, as Redis."""
    remind = _task(app)
    tracker = Tracker.for_app(app)
    with pytest.raises(InvalidPriority, match=r"priority .* 0 to (9|255)"):
        remind.apply_async(args=("a",), priority=bad)
    with pytest.raises(InvalidPriority):
        remind.with_options(options={"priority": bad})("a")
    assert tracker.jobs().jobs == ()


def test_a_task_priority_the_broker_cannot_carry_is_invalid_priority_at_enqueue(
    app: Celery,
) -> None:
    remind = _task(app, priority=50)  # 0-255 at decoration; the memory transport takes 0-9
    with pytest.raises(InvalidPriority, match="0 to 9"):
        remind.enqueue("a")
    with pytest.raises(InvalidTaskOption, match="priority"):  # at decoration, as every option
        _task(app, name="trial.other", priority=-1)


def _cancelled_at_its_deadline(app: Celery) -> tuple[Tracker, str]:
    remind = _task(app, deadline=timedelta(minutes=10))
    tracker = Tracker.for_app(app)
    job_id = remind.enqueue("a").job_id
    store = _store(tracker)
    job = store.rows[job_id]
    store.rows[job_id] = replace(job, deadline_at=utcnow() - timedelta(seconds=1))
    assert store.expire(job_id, now=utcnow(), message="its deadline passed")
    ended = tracker.get_job(job_id)
    assert ended is not None and ended.error_type == "DeadlineExceeded"
    return tracker, job_id


def test_a_retry_of_a_job_past_its_deadline_is_refused_without_a_new_one(app: Celery) -> None:
    tracker, job_id = _cancelled_at_its_deadline(app)
    with pytest.raises(RetryRefused, match=r"deadline .* has passed, so it would be cancelled"):
        tracker.retry(job_id)
    with pytest.raises(InvalidPayload, match=r"^deadline \(.*\) is not after"):
        tracker.retry(job_id, deadline=utcnow() - timedelta(minutes=1))
    with pytest.raises(InvalidPayload, match=r"^deadline must be a positive span"):
        tracker.retry(job_id, deadline=-5)
    job = tracker.get_job(job_id)
    assert job is not None and job.status is JobStatus.CANCELLED and job.revision == 0
    assert tracker.retry(job_id, deadline=timedelta(minutes=30))
    again = tracker.get_job(job_id)
    assert again is not None and again.status is JobStatus.PENDING
    assert again.published_at is not None and again.deadline_at is not None
    assert 1700 < (again.deadline_at - utcnow()).total_seconds() <= 1800
    # a retry of a job whose deadline is still ahead keeps it
    assert tracker.cancel(job_id)
    assert tracker.retry(job_id)
    kept = tracker.get_job(job_id)
    assert kept is not None and kept.deadline_at == again.deadline_at


def test_tracked_retry_takes_a_new_deadline(app: Celery) -> None:
    from celery.bin.base import CLIContext
    from click.testing import CliRunner

    from celery_tracked.cli import tracked

    tracker, job_id = _cancelled_at_its_deadline(app)
    context = CLIContext(app=app, no_color=True, workdir=None)
    refused = CliRunner().invoke(tracked, ["retry", job_id], obj=context)
    assert refused.exit_code == 3 and "--deadline 10m" in refused.output, refused.output
    bulk = CliRunner().invoke(tracked, ["retry", "--all", "--deadline", "1h"], obj=context)
    assert bulk.exit_code == 2 and "one job" in bulk.output
    assert "retried 1 of 1" in _cli(app, "retry", job_id, "--deadline", "in 2h")
    job = tracker.get_job(job_id)
    assert job is not None and job.status is JobStatus.PENDING and job.deadline_at is not None
    assert 7100 < (job.deadline_at - utcnow()).total_seconds() <= 7200


def _sent_countdowns(app: Celery) -> list[float | None]:
    """The countdowns of the messages the app publishes from now on."""
    sent: list[float | None] = []
    send = app.send_task

    def spy(*args: Any, **options: Any) -> Any:
        sent.append(options.get("countdown"))
        return send(*args, **options)

    app.send_task = spy  # type: ignore[method-assign]
    return sent


def test_a_fast_forwarded_pass_moves_the_due_time_so_no_long_eta_reaches_the_broker(
    app: Celery,
) -> None:
    """``schedule(now=...)`` ahead of the database's clock publishes a far job as due at
    that time: its due time moves forward by the same span, so its message's countdown
    and the claim's fence agree, and no delivery waits hours in the broker."""
    remind = _task(app)
    tracker = Tracker.for_app(app)
    far = remind.apply_async(args=("a",), countdown=7200)
    job = tracker.get_job(far.id)
    assert job is not None and job.due_at is not None
    sent = _sent_countdowns(app)
    report = tracker.schedule(now=job.due_at - timedelta(seconds=60)).as_dict()
    assert report["published"] == [far.id]
    moved = tracker.get_job(far.id)
    assert moved is not None and moved.due_at is not None and moved.published_at is not None
    assert 50 < (moved.due_at - utcnow()).total_seconds() <= 60  # not 2 h any more
    (countdown,) = sent
    assert countdown is not None and 50 < countdown <= 60
    event = tracker.history(far.id)[-1]
    assert event.event == "scheduled" and "fast-forward" in (event.message or "")


def test_a_pass_judging_at_a_past_time_never_publishes_late(app: Celery) -> None:
    remind = _task(app)
    tracker = Tracker.for_app(app)
    far = remind.apply_async(args=("a",), countdown=7200)
    job = tracker.get_job(far.id)
    assert job is not None and job.due_at is not None
    store = _store(tracker)  # it came within the horizon: due in 200 s
    soon = utcnow() + timedelta(seconds=200)
    store.rows[far.id] = replace(job, not_before=soon, updated_at=soon - timedelta(hours=2))
    sent = _sent_countdowns(app)
    assert tracker.schedule(now=utcnow() - timedelta(seconds=30)).as_dict()["published"] == [far.id]
    (countdown,) = sent  # the rest of its wait on the database's clock, not from ``now``
    assert countdown is not None and 190 < countdown <= 200
    kept = tracker.get_job(far.id)
    assert kept is not None and kept.due_at == store.rows[far.id].not_before


def test_a_relay_judging_ahead_never_publishes_a_job_not_due(app: Celery) -> None:
    """The relay's ``now=`` ages rows (its grace); a held job is due on the database's
    clock only, so it is never sent with hours of countdown."""
    remind = _task(app)
    tracker = Tracker.for_app(app)
    far = remind.apply_async(args=("a",), countdown=7200)
    assert tracker.relay(now=utcnow() + timedelta(hours=3)).as_dict()["published"] == []
    job = tracker.get_job(far.id)
    assert job is not None and job.published_at is None


def test_a_countdown_too_far_says_how_far_it_may_be(app: Celery) -> None:
    """A finite countdown beyond the bound is refused naming the bound (the issue 26 trial:
    it said "must be a finite number of seconds, got 1000000000000")."""
    remind = _task(app)
    with pytest.raises(InvalidPayload) as far:
        remind.apply_async(args=("a",), countdown=10**12)
    assert "finite" not in str(far.value)
    assert "from -2147483647 to 2147483647 (about 68 years)" in str(far.value)
    with pytest.raises(InvalidPayload, match=r"countdown must be a number of seconds from "):
        remind.apply_async(args=("a",), countdown=float("nan"))
