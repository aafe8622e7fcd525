"""The worker runner against the library's in-memory store (watched): every verdict, no service."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any
from unittest.mock import ANY

import pytest
from celery.exceptions import Ignore, MaxRetriesExceededError, Reject, Retry

from celery_tracked import StoreError, Unrecoverable
from celery_tracked.adapter.celery_signals import CELERY_SIGNALS
from celery_tracked.backends.memory import MemoryStore as LibraryMemoryStore
from celery_tracked.core.attempt import Attempt
from celery_tracked.core.errors import Refused
from celery_tracked.core.fences import AttemptError, Completion, Rows
from celery_tracked.core.hooks import Delivery, HookChain, Hooks, Transition
from celery_tracked.core.jobs import Claim, Job, JobStatus, NewRow, utcnow
from celery_tracked.core.limits import DeliveryLimits
from celery_tracked.core.messages import HEADER_PENDING_FAILURE, PendingFailure, TrackedHeaders
from celery_tracked.core.outcomes import (
    Completed,
    Failed,
    PassedOn,
    Postponed,
    Retrying,
    Skipped,
    Verdict,
)
from celery_tracked.core.retry_policy import RetryPolicy
from celery_tracked.core.run import Run
from celery_tracked.core.settings import Settings
from celery_tracked.services.lease import LeaseKeeper, owner_id
from celery_tracked.services.outcomes import OutcomeWriter
from celery_tracked.services.runner import Runner
from tests.unit.job_rows import a_job

SECRET = "hunter22"
BASE_MS = 1000


#: The store methods the runner tests watch (``calls``) and may break (``broken``).
WATCHED = (
    "clock",
    "get",
    "claim",
    "give_back",
    "take_over",
    "fail_lost",
    "complete",
    "retrying",
    "fail",
    "release",
    "renew",
    "key_busy",
    "key_waiting",
)


class MemoryStore(LibraryMemoryStore):
    """The library's ``MemoryStore``, watched: ``calls`` records what was called,
    ``broken`` names methods that raise ``StoreError`` (``refused``: ``Refused``),
    ``fail_times`` how many calls of a method fail before it works; the rows a completion
    or a failure was given are kept."""

    def __init__(self) -> None:
        super().__init__()
        self.broken: set[str] = set()
        self.refused: set[str] = set()
        self.fail_times: dict[str, int] = {}
        self.calls: list[str] = []
        self.completion_rows: list[NewRow] = []
        self.failure_rows: list[NewRow] = []
        self.retries_exhausted: bool | None = None

    def add(self, job_id: str = "j-1", **changes: Any) -> Job:
        now = utcnow()
        base = {"id": job_id, "celery_task_id": job_id, "correlation_id": job_id}
        base.update(job_type="send", task_name="app.send", created_at=now, updated_at=now)
        self.put(a_job(**{**base, **changes}))
        return self.rows[job_id]

    def _set(self, job_id: str, **changes: Any) -> None:
        self.put(replace(self.rows[job_id], **changes))

    def call(self, name: str) -> None:
        self.calls.append(name)
        if name in self.refused:
            raise Refused(f"{name}: a constraint refused a row")
        if name in self.broken:
            raise StoreError(f"{name}: database unavailable")
        if self.fail_times.get(name):
            self.fail_times[name] -= 1
            raise StoreError(f"{name}: server closed the connection unexpectedly")

    def complete(self, claim: Claim, done: Completion, resent: bool = False) -> bool:
        self.call("complete")
        saved = super().complete(claim, done, resent)
        if saved:
            self.completion_rows.extend(done.rows)
        return saved

    def fail(
        self, claim: Claim, error: AttemptError, rows: Rows = (), retries_exhausted: bool = False
    ) -> bool:
        self.call("fail")
        self.failure_rows = list(rows)
        self.retries_exhausted = retries_exhausted
        return super().fail(claim, error, rows, retries_exhausted)


def _watched(name: str) -> Callable[..., Any]:
    def method(self: MemoryStore, *args: Any, **kwargs: Any) -> Any:
        self.call(name)
        return getattr(LibraryMemoryStore, name)(self, *args, **kwargs)

    return method


for _name in WATCHED:
    if _name not in MemoryStore.__dict__:
        setattr(MemoryStore, _name, _watched(_name))


class Recorder(Hooks):
    """Collects every transition; optionally postpones deliveries or adds completion rows."""

    def __init__(self) -> None:
        self.transitions: list[Transition] = []
        self.postpone: float | None = None
        self.rows: list[NewRow] = []
        self.deliveries: list[Delivery] = []

    def before_claim(self, delivery: Delivery) -> float | None:
        self.deliveries.append(delivery)
        return self.postpone

    def completion_rows(self, attempt: Attempt, result: Any) -> Sequence[NewRow]:
        return self.rows

    def after_transition(self, transition: Transition) -> None:
        self.transitions.append(transition)

    @property
    def events(self) -> list[str]:
        return [t.event for t in self.transitions]


class World:
    def __init__(self, store: MemoryStore, recorder: Recorder, runner: Runner) -> None:
        self.store = store
        self.recorder = recorder
        self.runner = runner
        self.bodies = 0

    def run(
        self,
        body: Callable[[], Any] = lambda: None,
        job_id: str = "j-1",
        headers: TrackedHeaders | None = None,
        limits: DeliveryLimits | None = None,
    ) -> Verdict:
        return self.run_attempt(lambda running: body(), job_id, headers, limits)

    def run_attempt(
        self,
        body: Callable[[Attempt], Any],
        job_id: str = "j-1",
        headers: TrackedHeaders | None = None,
        limits: DeliveryLimits | None = None,
        policy: RetryPolicy | None = None,
    ) -> Verdict:
        """``run``, the body given its running attempt."""

        def counted(running: Attempt) -> Any:
            self.bodies += 1
            return body(running)

        run = Run(
            headers=headers or TrackedHeaders(job_id, job_id, None, "q"),
            task_name="app.send",
            job_type="send",
            queue="q",
            worker="w1@host",
            backoff_base_ms=BASE_MS,
            secrets=lambda: [SECRET],
            limits=limits,
            signals=CELERY_SIGNALS,
            policy=policy or RetryPolicy(),
        )
        return self.runner.run(run, counted)

    def job(self, job_id: str = "j-1") -> Job:
        return self.store.rows[job_id]


@pytest.fixture
def world() -> Iterator[World]:
    store = MemoryStore()
    recorder = Recorder()
    keeper = LeaseKeeper(store, lease_seconds=60)  # type: ignore[arg-type]
    settings = Settings(redis_url="memory://")
    runner = Runner(store, keeper, HookChain([recorder]), settings)  # type: ignore[arg-type]
    yield World(store, recorder, runner)
    keeper.stop()


def fail_with(error: BaseException) -> Callable[[], Any]:
    def body() -> Any:
        raise error

    return body


# -- Completed ----------------------------------------------------------------------


def test_completed_records_the_result(world: World) -> None:
    world.store.add()
    verdict = world.run(lambda: {"sent": 2})
    assert verdict == Completed({"sent": 2})
    job = world.job()
    assert (job.status, job.attempts_made, job.result_json) == (
        JobStatus.COMPLETED,
        1,
        '{"sent":2}',
    )
    assert job.locked_by is None and job.worker == "w1@host"
    assert world.recorder.events == ["processing", "completed"]
    done = world.recorder.transitions[-1]
    assert (done.job_id, done.attempt, done.queue, done.job_type) == ("j-1", 1, "q", "send")
    assert done.duration_ms is not None and done.duration_ms >= 0


def test_completion_rows_of_the_hooks_are_written_with_the_completion(world: World) -> None:
    world.store.add()
    row = NewRow(
        "background_job_events",
        {"job_id": "j-1", "event": "note", "status": "processing", "created_at": utcnow()},
    )
    world.recorder.rows = [row]
    assert world.run(lambda: 1) == Completed(1)
    assert world.store.completion_rows == [row]


def test_the_lease_is_held_while_the_body_runs(world: World) -> None:
    world.store.add()
    seen: list[bool] = []
    world.run(lambda: seen.append(world.runner.leases.is_active("j-1")))
    assert seen == [True]
    assert not world.runner.leases.is_active("j-1")


def test_a_result_that_is_not_json_fails_the_job(world: World) -> None:
    world.store.add()
    verdict = world.run(lambda: object())
    assert isinstance(verdict, Failed) and isinstance(verdict.error, Unrecoverable)
    assert (world.job().status, world.job().error_type) == (JobStatus.FAILED, "Unrecoverable")


def test_a_result_of_celerys_json_types_completes_and_reads_back_typed(world: World) -> None:
    world.store.add()
    value = {"at": datetime(2024, 5, 1, tzinfo=UTC), "amount": Decimal("9.90"), "id": uuid.uuid4()}
    assert world.run(lambda: value) == Completed(value)
    job = world.job()
    assert job.status is JobStatus.COMPLETED and job.result == value
    assert json.loads(job.result_json or "")["amount"] == {
        "__type__": "decimal",
        "__value__": "9.90",
    }


# -- Retrying -----------------------------------------------------------------------


def test_a_plain_error_with_attempts_left_retries_after_the_backoff(world: World) -> None:
    world.store.add()
    error = ValueError("smtp down")
    verdict = world.run(fail_with(error))
    assert isinstance(verdict, Retrying) and verdict.cause is error
    assert BASE_MS / 1000 <= verdict.countdown <= BASE_MS * 1.25 / 1000
    job = world.job()
    assert (job.status, job.error_type, job.error_message) == (
        JobStatus.RETRYING,
        "ValueError",
        "smtp down",
    )
    assert world.recorder.events == ["processing", "retrying"]


def test_the_second_attempt_backs_off_twice_as_long(world: World) -> None:
    world.store.add(status=JobStatus.RETRYING, attempts_made=1)
    verdict = world.run(fail_with(ValueError("x")))
    assert isinstance(verdict, Retrying)
    assert 2 * BASE_MS / 1000 <= verdict.countdown <= 2 * BASE_MS * 1.25 / 1000
    assert world.job().attempts_made == 2


# -- Failed -------------------------------------------------------------------------


def test_the_last_attempt_fails(world: World) -> None:
    world.store.add(status=JobStatus.RETRYING, attempts_made=2)
    error = KeyError("gone")
    assert world.run(fail_with(error)) == Failed(error)
    job = world.job()
    assert (job.status, job.attempts_made, job.error_type) == (JobStatus.FAILED, 3, "KeyError")
    assert job.finished_at is not None
    assert world.recorder.events == ["processing", "failed"]
    assert world.store.retries_exhausted is True


@pytest.mark.parametrize(
    ("policy", "error", "why"),
    [
        (
            RetryPolicy().under("celery"),
            ValueError(f"bad password {SECRET}"),
            "its task does not retry ValueError: under Celery's retry semantics, only "
            "self.retry and autoretry_for retry",
        ),
        (
            RetryPolicy(retry_on=(KeyError,)),
            ValueError(f"bad password {SECRET}"),
            "ValueError is not in its task's autoretry_for",
        ),
        (
            RetryPolicy(never_retry=(ValueError,)),
            ValueError(f"bad password {SECRET}"),
            "ValueError is in its task's dont_autoretry_for",
        ),
        (RetryPolicy(), Unrecoverable(f"bad password {SECRET}"), "Unrecoverable ends its job"),
    ],
)
def test_a_failure_not_retried_records_its_error_and_why(
    world: World, policy: RetryPolicy, error: Exception, why: str
) -> None:
    """The ``failed`` event of an error its task does not retry says the error (type,
    masked message) and why it was not retried, as its task's policy decided: a reader
    that does not know the task (``tracked show`` in another process) reads it there."""
    world.store.add(max_attempts=4)
    assert world.run_attempt(lambda running: fail_with(error)(), policy=policy) == Failed(ANY)
    job = world.job()
    kind = type(error).__name__
    assert (job.status, job.error_type, job.error_message) == (
        JobStatus.FAILED, kind, "bad password ***",
    )  # fmt: skip
    failed = [e for e in world.store.events(job.id) if e.event == "failed"]
    assert [e.message for e in failed] == [f"{kind}: bad password ***; not retried: {why}"]
    logged = world.recorder.transitions[-1].message
    assert logged.endswith(f"{kind}: bad password ***; not retried: {why}"), logged


@pytest.mark.parametrize("max_attempts", [1, 5])
def test_unrecoverable_is_a_stop_not_used_up_retries(world: World, max_attempts: int) -> None:
    world.store.add(max_attempts=max_attempts)
    assert world.run(fail_with(Unrecoverable("credits"))) == Failed(ANY)
    assert world.job().status is JobStatus.FAILED
    assert world.store.retries_exhausted is False


def test_unrecoverable_fails_on_the_first_attempt(world: World) -> None:
    world.store.add(max_attempts=5)
    error = Unrecoverable("bad address")
    assert world.run(fail_with(error)) == Failed(error)
    job = world.job()
    assert (job.status, job.attempts_made, job.error_type, job.error_message) == (
        JobStatus.FAILED,
        1,
        "Unrecoverable",
        "bad address",
    )


def test_reject_without_requeue_fails(world: World) -> None:
    world.store.add()
    error = Reject("poison", requeue=False)
    assert world.run(fail_with(error)) == Failed(error)
    assert world.job().status is JobStatus.FAILED


# -- PassedOn -----------------------------------------------------------------------


def test_ignore_is_passed_on_and_the_job_completed(world: World) -> None:
    world.store.add()
    signal = Ignore()
    assert world.run(fail_with(signal)) == PassedOn(signal)
    assert world.job().status is JobStatus.COMPLETED
    assert world.job().result_json is None
    assert "ignored or replaced" in world.recorder.transitions[-1].message


def test_reject_requeue_releases_the_lease(world: World) -> None:
    world.store.add()
    signal = Reject("not now", requeue=True)
    assert world.run(fail_with(signal)) == PassedOn(signal)
    job = world.job()
    assert (job.status, job.attempts_made, job.locked_by) == (JobStatus.PROCESSING, 1, None)
    assert job.locked_until is None
    assert "release" in world.store.calls


def test_a_requeued_delivery_takes_the_released_lease_over(world: World) -> None:
    world.store.add()
    world.run(fail_with(Reject("not now", requeue=True)))
    assert world.run(lambda: "ok") == Completed("ok")
    assert (world.job().status, world.job().attempts_made) == (JobStatus.COMPLETED, 2)


def test_a_self_retry_with_attempts_left_is_passed_on_and_recorded(world: World) -> None:
    world.store.add()
    cause = ValueError("rate limited")
    signal = Retry(exc=cause, when=30)
    assert world.run(fail_with(signal)) == PassedOn(signal)
    job = world.job()
    assert (job.status, job.error_type, job.error_message) == (
        JobStatus.RETRYING,
        "ValueError",
        "rate limited",
    )
    retrying = world.recorder.transitions[-1]
    assert retrying.event == "retrying" and "retry in 30000 ms" in retrying.message


def test_a_retry_raised_on_the_last_attempt_fails_with_its_cause(world: World) -> None:
    """``TrackedTask.retry`` never re-publishes from the last attempt; a ``Retry`` raised
    there anyway fails the job, and Celery gets a failure (never ``Retry``: its state would
    stay RETRY), as Celery's own ``retry`` raises once no retry remains."""
    world.store.add(status=JobStatus.RETRYING, attempts_made=2)
    cause = ValueError("still limited")
    assert world.run(fail_with(Retry(exc=cause, when=30))) == Failed(cause)
    assert (world.job().status, world.job().error_type) == (JobStatus.FAILED, "ValueError")
    assert world.store.retries_exhausted is True


def test_a_retry_without_a_cause_on_the_last_attempt_is_max_retries_exceeded(
    world: World,
) -> None:
    world.store.add(status=JobStatus.RETRYING, attempts_made=2)
    verdict = world.run(fail_with(Retry(when=30)))
    assert isinstance(verdict, Failed)
    assert isinstance(verdict.error, MaxRetriesExceededError)


def test_an_error_a_self_retry_gave_up_with_fails_the_job_with_attempts_left(
    world: World,
) -> None:
    """Celery's ``retry`` raised the body's exception (the call's own ``max_retries`` was
    reached): the job fails with it, retries used up, though attempts remain."""
    world.store.add()
    error = ValueError("no more")

    def body(running: Attempt) -> None:
        assert running is not None and (running.number, running.retries) == (1, 0)
        running.give_up(error)
        raise error

    assert world.run_attempt(body) == Failed(error)
    job = world.job()
    assert (job.status, job.attempts_made) == (JobStatus.FAILED, 1)
    assert world.store.retries_exhausted is True


def test_a_body_s_own_retry_backoff_counts_from_its_publish(world: World) -> None:
    """The message of ``self.retry(countdown=30)`` is published before the attempt is
    written: the job's backoff ends by the message's due time, not later."""
    world.store.add()
    signal = Retry(exc=ValueError("later"), when=30)

    def body(running: Attempt) -> None:
        assert running is not None
        running.retrying(utcnow() - timedelta(seconds=10))  # published 10 s ago
        raise signal

    assert world.run_attempt(body) == PassedOn(signal)
    retrying = world.recorder.transitions[-1]
    delay = int(retrying.message.rsplit("retry in ", 1)[1].split(" ms")[0])
    assert 20_000 - 1_000 <= delay <= 20_000, retrying.message  # the message's due time


# -- Skipped ------------------------------------------------------------------------


def test_a_missing_job_is_skipped(world: World) -> None:
    verdict = world.run(job_id="nope")
    assert isinstance(verdict, Skipped) and "no such job" in verdict.reason
    assert world.bodies == 0
    assert world.recorder.events == ["skipped"]


@pytest.mark.parametrize("status", [JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED])
def test_an_ended_job_is_skipped(world: World, status: JobStatus) -> None:
    world.store.add(status=status, attempts_made=1)
    assert world.run() == Skipped(f"job already {status.value}")
    assert world.bodies == 0
    assert world.job().status is status


def test_a_lost_last_attempt_with_a_dead_holder_fails_worker_lost(world: World) -> None:
    # held by this very process, which no longer runs it: its holder is dead, even though
    # the lease itself has not expired
    world.store.add(
        status=JobStatus.PROCESSING,
        attempts_made=3,
        locked_by=owner_id(),
        locked_until=utcnow() + timedelta(hours=1),
    )
    verdict = world.run()
    assert isinstance(verdict, Skipped) and "no attempts remain" in verdict.reason
    assert world.bodies == 0
    job = world.job()
    assert (job.status, job.error_type) == (JobStatus.FAILED, "WorkerLost")
    assert "its worker process died" in (job.error_message or "")
    assert world.recorder.events == ["failed", "skipped"]


def test_a_lost_attempt_with_attempts_left_is_taken_over(world: World) -> None:
    world.store.add(
        status=JobStatus.PROCESSING,
        attempts_made=1,
        locked_by="elsewhere:1:123",
        locked_until=utcnow() - timedelta(seconds=16),  # expired longer than the grace
    )
    assert world.run(lambda: "again") == Completed("again")
    assert (world.job().status, world.job().attempts_made) == (JobStatus.COMPLETED, 2)
    assert "take_over" in world.store.calls


def test_a_lease_expired_within_the_grace_is_not_taken_over_yet(world: World) -> None:
    world.store.add(
        status=JobStatus.PROCESSING,
        attempts_made=1,
        locked_by="elsewhere:1:123",
        locked_until=utcnow() - timedelta(seconds=1),
    )
    verdict = world.run()
    assert isinstance(verdict, Postponed)
    assert 13.9 <= verdict.countdown <= 14.1  # the grace (a quarter of the 60 s lease) left
    assert world.bodies == 0 and "take_over" not in world.store.calls


def test_a_completion_whose_lease_was_taken_over_is_skipped(world: World) -> None:
    world.store.add()

    def body() -> str:  # another delivery takes the job over while this body runs
        world.store._set("j-1", attempts_made=2, locked_by="elsewhere:1:9")
        return "late"

    verdict = world.run(body)
    assert verdict == Skipped("attempt 1 lost its lease")
    assert world.job().status is JobStatus.PROCESSING
    assert world.recorder.events == ["processing", "lease_lost"]


def test_a_completion_whose_claim_was_lost_is_postponed(world: World) -> None:
    world.store.add()

    def body() -> str:  # the database lost the claim: the row is claimable again
        world.store._set("j-1", status=JobStatus.PENDING, attempts_made=0)
        return "x"

    assert world.run(body) == Postponed(0.5, "the job is claimable again")


# -- Postponed ----------------------------------------------------------------------


def test_another_live_lease_postpones_for_its_remaining_time(world: World) -> None:
    world.store.add(
        status=JobStatus.PROCESSING,
        attempts_made=1,
        locked_by="elsewhere:1:123",
        locked_until=utcnow() + timedelta(seconds=20),
    )
    verdict = world.run()
    assert isinstance(verdict, Postponed)
    assert 34.0 <= verdict.countdown <= 35.1  # its remaining time and the takeover grace
    assert verdict.reason == "attempt 1 is running elsewhere"
    assert world.bodies == 0 and world.job().attempts_made == 1
    assert world.recorder.events == ["busy"]


def test_a_long_live_lease_postpones_at_most_one_lease(world: World) -> None:
    world.store.add(
        status=JobStatus.PROCESSING,
        attempts_made=1,
        locked_by="elsewhere:1:123",
        locked_until=utcnow() + timedelta(hours=2),
    )
    verdict = world.run()
    assert isinstance(verdict, Postponed) and verdict.countdown == 60.0  # lease_seconds


def test_an_unreachable_database_at_claim_postpones(world: World) -> None:
    world.store.add()
    world.store.broken.add("claim")
    verdict = world.run()
    assert isinstance(verdict, Postponed) and verdict.reason == "database unavailable"
    assert 0.5 <= verdict.countdown <= 1.25
    assert world.bodies == 0
    assert world.job().attempts_made == 0
    assert world.recorder.events == ["error"]


def test_a_hook_postpones_before_the_claim(world: World) -> None:
    world.store.add()
    world.recorder.postpone = 2.0
    assert world.run() == Postponed(2.0, "a hook asked to wait")
    assert world.recorder.deliveries == [Delivery("j-1", "send", "q", "app.send")]
    assert "claim" not in world.store.calls
    assert world.bodies == 0 and world.job().status is JobStatus.PENDING
    assert world.recorder.events == ["busy"]


def test_a_waiting_job_postponed_says_its_message_was_handed_over_again(world: World) -> None:
    """The reaper's sign that a message waiting its turn is alive (issue 22, item 0)."""
    long_ago = utcnow() - timedelta(hours=1)
    world.store.add(published_at=long_ago)
    world.recorder.postpone = 2.0
    assert isinstance(world.run(), Postponed)
    published = world.job().published_at
    assert published is not None and published > long_ago + timedelta(minutes=59)
    world.store.add("j-2")  # never handed over: the relay's, not marked
    world.run(job_id="j-2")
    assert world.store.rows["j-2"].published_at is None


@pytest.fixture(autouse=True)
def no_resend_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(OutcomeWriter, "RESEND_PAUSES_S", (0.0, 0.0, 0.0))


def test_a_completion_whose_connection_failed_is_resent_and_completes(world: World) -> None:
    world.store.add()
    world.store.fail_times["complete"] = 2
    verdict = world.run(lambda: "done")
    assert verdict == Completed("done")
    assert world.store.calls.count("complete") == 3
    job = world.job()
    assert (job.status, job.attempts_made) == (JobStatus.COMPLETED, 1)
    assert world.bodies == 1
    assert world.recorder.events == ["processing", "error", "error", "completed"]


def test_a_completion_that_cannot_be_written_retries(world: World) -> None:
    """Only once the bounded re-sends are spent does the attempt fall back to a retry."""
    world.store.add()
    world.store.broken.add("complete")
    verdict = world.run(lambda: "done")
    assert isinstance(verdict, Retrying) and verdict.cause is None
    assert BASE_MS / 1000 <= verdict.countdown <= BASE_MS * 1.25 / 1000
    assert (world.job().status, world.job().error_type) == (JobStatus.RETRYING, "StoreError")
    assert world.store.calls.count("complete") == 4  # the send and three re-sends


def _redelivered(verdict: Verdict) -> TrackedHeaders:
    """The headers of the message ``verdict`` re-published (Celery merges the new ones)."""
    assert isinstance(verdict, Postponed) and verdict.headers is not None
    headers = TrackedHeaders("j-1", "j-1", None, "q").to_headers()
    redelivered = TrackedHeaders.read({**headers, **verdict.headers})
    assert redelivered is not None
    return redelivered


@pytest.mark.parametrize("attempts_made", [0, 2], ids=["first-attempt", "last-attempt"])
def test_a_completion_lost_to_an_outage_is_recorded_retrying_when_the_database_answers(
    world: World, attempts_made: int
) -> None:
    """Issue 12 item 16 (docs/lifecycle.md step 5): the completion and the ``retrying``
    write both met the outage. The re-published message carries the retry; its delivery
    records ``retrying`` once the database answers, and the next attempt runs after the
    backoff: no lease to wait out, no "lost" attempt, and never ``failed`` on the last
    attempt (the body had succeeded)."""
    world.store.add(status=JobStatus.PENDING, attempts_made=attempts_made, max_attempts=3)
    world.store.broken.update({"complete", "retrying"})
    verdict = world.run(lambda: "done")
    assert isinstance(verdict, Postponed) and verdict.reason == "retry not recorded"
    failure = _redelivered(verdict).pending_retry
    assert _redelivered(verdict).pending_failure is None
    assert failure is not None and failure.attempt == attempts_made + 1
    assert failure.error_type == "StoreError" and failure.retry_ms is not None
    assert BASE_MS <= failure.retry_ms <= BASE_MS * 1.25 * 2**attempts_made
    assert world.job().status is JobStatus.PROCESSING

    # the database still away: postponed again, nothing run
    again = world.run(headers=_redelivered(verdict))
    assert isinstance(again, Postponed) and again.reason == "retry still not recorded"
    assert world.bodies == 1

    # it answers: retrying is recorded for that attempt, the next one waits its backoff
    world.store.broken.clear()
    waiting = world.run(headers=_redelivered(verdict))
    assert isinstance(waiting, Postponed) and waiting.reason == "its backoff is not due"
    job = world.job()
    assert (job.status, job.attempts_made, job.error_type) == (
        JobStatus.RETRYING,
        attempts_made + 1,
        "StoreError",
    )
    assert world.recorder.events[-2:] == ["retrying", "busy"]
    assert "recorded late" in world.recorder.transitions[-2].message
    assert "lease_lost" not in world.recorder.events and world.bodies == 1

    # once due, the next attempt runs the body again (past max_attempts if need be)
    world.store._set("j-1", not_before=utcnow())
    assert world.run(lambda: "again", headers=_redelivered(verdict)) == Completed("again")
    job = world.job()
    assert (job.status, job.attempts_made) == (JobStatus.COMPLETED, attempts_made + 2)
    assert world.bodies == 2


def test_a_pending_retry_of_an_attempt_that_moved_on_writes_nothing(world: World) -> None:
    """A stale header (the message re-published again later) costs one fenced write that
    matches nothing; the delivery goes on as usual."""
    world.store.add(status=JobStatus.RETRYING, attempts_made=3, max_attempts=5)
    headers = TrackedHeaders("j-1", pending_retry=PendingFailure(2, "StoreError", "x", False, 5))
    assert world.run(lambda: "ok", headers=headers) == Completed("ok")
    assert world.job().attempts_made == 4 and "retrying" not in world.recorder.events


def test_a_retry_that_cannot_be_written_still_retries(world: World) -> None:
    world.store.add()
    world.store.broken.add("retrying")
    error = ValueError("x")
    verdict = world.run(fail_with(error))
    assert isinstance(verdict, Retrying) and verdict.cause is error
    assert world.recorder.events == ["processing", "error"]


def test_a_failure_that_cannot_be_written_is_carried_by_the_message(world: World) -> None:
    world.store.add(status=JobStatus.RETRYING, attempts_made=2)
    world.store.broken.add("fail")
    verdict = world.run(fail_with(ValueError(f"login {SECRET} refused")))
    assert isinstance(verdict, Postponed) and verdict.reason == "failure not recorded"
    assert verdict.countdown == 1.0
    assert verdict.headers is not None
    failure = PendingFailure.decode(verdict.headers[HEADER_PENDING_FAILURE])
    assert failure == PendingFailure(3, "ValueError", "login *** refused", True)
    assert world.job().status is JobStatus.PROCESSING

    # the next delivery, with those headers, records the failure and runs nothing
    world.store.broken.clear()
    headers = TrackedHeaders("j-1", "j-1", None, "q").to_headers()
    redelivered = TrackedHeaders.read({**headers, **verdict.headers})
    assert redelivered is not None
    assert world.run(headers=redelivered) == Skipped("failure recorded late")
    assert world.bodies == 1
    job = world.job()
    assert (job.status, job.error_type, job.error_message) == (
        JobStatus.FAILED,
        "ValueError",
        "login *** refused",
    )
    assert world.recorder.events[-1] == "failed"


def test_a_pending_failure_is_recorded_without_calling_the_body(world: World) -> None:
    world.store.add(status=JobStatus.PROCESSING, attempts_made=2, locked_by="x:1:1")
    headers = TrackedHeaders("j-1", pending_failure=PendingFailure(2, "KeyError", "k"))
    assert world.run(headers=headers) == Skipped("failure recorded late")
    assert world.bodies == 0
    assert "claim" not in world.store.calls
    assert (world.job().status, world.job().error_type) == (JobStatus.FAILED, "KeyError")


def test_a_pending_failure_still_not_recordable_is_postponed_again(world: World) -> None:
    world.store.add(status=JobStatus.PROCESSING, attempts_made=2)
    world.store.broken.add("fail")
    headers = TrackedHeaders("j-1", pending_failure=PendingFailure(2, "KeyError", "k"))
    verdict = world.run(headers=headers)
    assert isinstance(verdict, Postponed) and verdict.reason == "failure still not recorded"
    assert verdict.countdown >= 0.5
    assert world.bodies == 0


def test_a_pending_failure_of_an_attempt_taken_over_writes_nothing(world: World) -> None:
    world.store.add(status=JobStatus.PROCESSING, attempts_made=3)
    headers = TrackedHeaders("j-1", pending_failure=PendingFailure(2, "KeyError", "k"))
    assert world.run(headers=headers) == Skipped("failure recorded late")
    assert world.job().status is JobStatus.PROCESSING
    assert "failed" not in world.recorder.events


# -- secrets ------------------------------------------------------------------------


def test_secrets_are_masked_in_the_raised_exception_and_the_record(world: World) -> None:
    world.store.add()
    error = ValueError(f"cannot log in with {SECRET}")
    verdict = world.run(fail_with(error))
    assert isinstance(verdict, Retrying) and verdict.cause is error
    assert str(error) == "cannot log in with ***"
    assert world.job().error_message == "cannot log in with ***"
    assert all(SECRET not in t.message for t in world.recorder.transitions)


class OpaqueError(Exception):
    """An exception whose text ignores its ``args``: it cannot be masked in place."""

    def __init__(self, password: str) -> None:
        super().__init__("login refused")
        self.password = password

    def __str__(self) -> str:
        return f"login refused for {self.password}"


def test_the_record_is_masked_even_when_the_exception_cannot_be(world: World) -> None:
    world.store.add()
    world.run(fail_with(OpaqueError(SECRET)))
    assert world.job().error_message == "login refused for ***"


def test_secrets_are_masked_in_a_failed_attempts_chain(world: World) -> None:
    world.store.add(max_attempts=1)
    try:
        try:
            raise OSError(f"token {SECRET} rejected")
        except OSError as inner:
            raise Unrecoverable(f"gave up on {SECRET}") from inner
    except Unrecoverable as exc:
        error = exc
    verdict = world.run(fail_with(error))
    assert verdict == Failed(error)
    assert SECRET not in str(error) and SECRET not in str(error.__cause__)
    assert world.job().error_message == "gave up on ***"


def test_secrets_are_masked_in_a_self_retrys_cause(world: World) -> None:
    world.store.add()
    cause = ValueError(f"bad {SECRET}")
    world.run(fail_with(Retry(exc=cause, when=1)))
    assert str(cause) == "bad ***"
    assert world.job().error_message == "bad ***"


def test_secrets_are_only_computed_when_an_error_must_be_masked(world: World) -> None:
    world.store.add()
    asked: list[int] = []
    run = Run(
        headers=TrackedHeaders("j-1"),
        task_name="app.send",
        job_type="send",
        queue="q",
        worker="w",
        backoff_base_ms=BASE_MS,
        secrets=lambda: asked.append(1) or [SECRET],
        signals=CELERY_SIGNALS,
    )
    assert world.runner.run(run, lambda running: "fine") == Completed("fine")
    assert asked == []


def test_the_live_lease_of_this_process_is_never_taken_for_a_dead_one(world: World) -> None:
    world.store.add()
    inner: list[Verdict] = []
    # a duplicate delivery in the same process while the first still runs the body
    world.run(lambda: inner.append(world.run()))
    assert isinstance(inner[0], Postponed)
    assert world.job().status is JobStatus.COMPLETED
    assert world.job().attempts_made == 1


# -- hooks and refused rows: defined outcomes, never a stuck row ----------------------


class Raising(Hooks):
    def __init__(self, where: str) -> None:
        self.where = where

    def before_claim(self, delivery: Delivery) -> float | None:
        if self.where == "before_claim":
            raise RuntimeError("hook bug")
        return None

    def completion_rows(self, attempt: Attempt, result: Any) -> Sequence[NewRow]:
        if self.where == "completion_rows":
            raise RuntimeError(f"hook bug ({SECRET})")
        return ()


def test_a_before_claim_hook_that_raises_does_not_strand_the_job(world: World) -> None:
    world.store.add()
    world.runner.hooks.add(Raising("before_claim"))  # type: ignore[attr-defined]
    assert world.run(lambda: 1) == Completed(1)
    assert world.job().status is JobStatus.COMPLETED


@pytest.mark.parametrize("attempts_made, status", [(0, JobStatus.RETRYING), (2, JobStatus.FAILED)])
def test_a_completion_rows_hook_that_raises_fails_the_attempt(
    world: World, attempts_made: int, status: JobStatus
) -> None:
    world.store.add(attempts_made=attempts_made, status=JobStatus.RETRYING)
    world.runner.hooks.add(Raising("completion_rows"))  # type: ignore[attr-defined]
    verdict = world.run(lambda: 1)
    job = world.job()
    assert job.status is status and job.attempts_made == attempts_made + 1
    assert job.error_type == "RuntimeError" and SECRET not in (job.error_message or "")
    if status is JobStatus.RETRYING:
        assert isinstance(verdict, Retrying) and verdict.countdown >= BASE_MS / 1000
    else:
        assert isinstance(verdict, Failed) and SECRET not in str(verdict.error)
    assert "complete" not in world.store.calls


@pytest.mark.parametrize("attempts_made, status", [(0, JobStatus.RETRYING), (2, JobStatus.FAILED)])
def test_completion_rows_the_database_refuses_fail_the_attempt(
    world: World, attempts_made: int, status: JobStatus
) -> None:
    """A refused row is not an outage: retried like a failed body, within max_attempts."""
    world.store.add(attempts_made=attempts_made, status=JobStatus.RETRYING)
    world.store.refused.add("complete")
    verdict = world.run(lambda: 1)
    job = world.job()
    assert job.status is status and job.error_type == "StoreError"
    assert isinstance(verdict, Retrying if status is JobStatus.RETRYING else Failed)


def test_rows_of_an_unknown_table_are_refused_when_built() -> None:
    with pytest.raises(ValueError, match="not a celery-tracked table"):
        NewRow("users", {"id": 1})
