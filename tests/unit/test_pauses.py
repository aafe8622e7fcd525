"""Pauses (issue 26, item 3), no service: the scope and the names checked, the worker's gate
reading the pauses at most once per TTL, and the runner holding a covered delivery in the
(in-memory) store without using an attempt."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from celery_tracked.adapter.celery_signals import CELERY_SIGNALS
from celery_tracked.backends.memory import MemoryStore
from celery_tracked.core.errors import InvalidPause, StoreError
from celery_tracked.core.hooks import Delivery, HookChain
from celery_tracked.core.jobs import JobStatus
from celery_tracked.core.messages import TrackedHeaders
from celery_tracked.core.outcomes import Postponed, Skipped
from celery_tracked.core.pauses import HELD_BY_PAUSE, scope_of
from celery_tracked.core.run import Run
from celery_tracked.core.settings import Settings
from celery_tracked.services.lease import LeaseKeeper
from celery_tracked.services.pauses import Pauses
from celery_tracked.services.runner import Runner
from tests.unit.job_rows import a_job


class Counted(MemoryStore):
    """The memory store, its ``pauses`` reads counted (``broken``: they fail)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0
        self.broken = False

    def pauses(self) -> Any:
        self.reads += 1
        if self.broken:
            raise StoreError("database down")
        return super().pauses()


def known() -> tuple[set[str], set[str]]:
    return {"q", "emails"}, {"ocr", "send"}


def delivery(queue: str = "q", job_type: str = "send", inline: bool = False) -> Delivery:
    return Delivery("j-1", job_type, queue, "app.send", None, inline)


@pytest.mark.parametrize(
    "given",
    [{}, {"queue": "q", "job_type": "ocr"}, {"queue": "q", "everything": True}, {"queue": ""}],
)
def test_exactly_one_scope_with_a_name(given: dict[str, Any]) -> None:
    with pytest.raises(InvalidPause):
        scope_of(given.get("queue"), given.get("job_type"), given.get("everything", False))


def test_unknown_names_are_refused_and_nothing_is_written() -> None:
    store = Counted()
    gate = Pauses(store, known)
    with pytest.raises(InvalidPause, match=r"unknown queue 'nope'.*known ones \(emails, q\)"):
        gate.pause(queue="nope")
    with pytest.raises(InvalidPause, match="unknown job type 'nope'"):
        gate.pause(job_type="nope")
    with pytest.raises(InvalidPause, match="reason"):
        gate.pause(queue="q", reason="x" * 3000)
    assert store.pauses() == []
    with pytest.raises(InvalidPause, match="unknown queue"):
        gate.resume(queue="nope")
    assert gate.resume(queue="q") is False  # known, not paused: nothing to do


def test_a_pause_is_recorded_with_who_and_why_and_kept_on_a_second_pause() -> None:
    gate = Pauses(Counted(), known)
    first = gate.pause(job_type="ocr", reason="provider down")
    assert "@" in (first.paused_by or "") and first.reason == "provider down"
    again = gate.pause(job_type="ocr", reason="other", by="someone")
    assert again == first
    assert "job type 'ocr' paused by" in first.describe()
    assert gate.resume(job_type="ocr") and gate.paused() == []


def test_the_gate_reads_the_pauses_once_per_ttl_and_holds_what_they_cover() -> None:
    store = Counted()
    gate = Pauses(store, known, ttl_s=60)
    for _ in range(100):
        assert gate.before_claim(delivery()) is None
    assert store.reads == 1  # nothing paused: one read, then memory only
    store.pause("job_type", "ocr", by="ops", reason=None)
    assert gate.before_claim(delivery(job_type="ocr")) is None  # not seen before the TTL
    gate._read_at -= 61  # the TTL passed
    wait = gate.before_claim(delivery(job_type="ocr"))
    assert wait is not None and wait.hold and "job type 'ocr' paused by ops" in wait.reason
    assert gate.before_claim(delivery(job_type="send")) is None
    assert gate.before_claim(delivery(job_type="ocr", inline=True)) is None  # eager runs
    assert store.reads == 2


def test_the_gate_keeps_the_last_pauses_while_the_database_fails() -> None:
    store = Counted()
    gate = Pauses(store, known, ttl_s=0)
    store.pause("queue", "q", by="ops", reason=None)
    assert gate.before_claim(delivery()) is not None
    store.broken = True
    assert gate.before_claim(delivery()) is not None  # still held


@pytest.fixture
def runner() -> Iterator[tuple[Runner, MemoryStore]]:
    store = MemoryStore()
    keeper = LeaseKeeper(store, lease_seconds=60)
    gate = Pauses(store, known, ttl_s=0)
    runner = Runner(store, keeper, HookChain([gate]), Settings(redis_url="memory://"))
    yield runner, store
    keeper.stop()


def run_of(job_id: str, secrets: tuple[str, ...] = ()) -> Run:
    return Run(
        headers=TrackedHeaders(job_id, job_id, None, "q"),
        task_name="app.send",
        job_type="send",
        queue="q",
        worker="w1@host",
        backoff_base_ms=1000,
        secrets=lambda: list(secrets),
        limits=None,
        signals=CELERY_SIGNALS,
    )


def test_a_covered_delivery_is_held_in_the_store_without_an_attempt(
    runner: tuple[Runner, MemoryStore],
) -> None:
    run, store = runner
    store.put(a_job(id="j-1", queue_name="q", job_type="send"))
    store.pause("queue", "q", by="ops", reason="provider down")
    bodies: list[int] = []
    verdict = run.run(run_of("j-1"), lambda _: bodies.append(1))
    assert isinstance(verdict, Skipped) and "held" in verdict.reason and bodies == []
    job = store.get("j-1")
    assert job is not None and job.status is JobStatus.PENDING and job.attempts_made == 0
    assert job.locked_by == HELD_BY_PAUSE and job.published_at is None and job.revision == 1
    assert [e.event for e in store.events("j-1")][-1] == "paused"
    # its old message again runs nothing (a newer revision)
    again = run.run(run_of("j-1"), lambda _: bodies.append(1))
    assert isinstance(again, Skipped) and bodies == []


def test_a_delivery_with_redacted_arguments_and_no_key_is_postponed_instead(
    runner: tuple[Runner, MemoryStore],
) -> None:
    run, store = runner
    store.put(a_job(id="j-2", queue_name="q", job_type="send"))
    store.pause("all", "*", by="ops", reason=None)
    verdict = run.run(run_of("j-2", secrets=("hunter22",)), lambda _: None)
    assert isinstance(verdict, Postponed) and verdict.countdown == Pauses.WAIT_S
    job = store.get("j-2")
    assert job is not None and job.locked_by is None and job.attempts_made == 0


def test_a_reason_and_its_author_are_stored_with_their_secrets_masked() -> None:
    """They are shown by ``paused()``, logged, and copied into every held job's event."""
    from celery_tracked.core.redact import Redaction

    gate = Pauses(Counted(), known, redaction=Redaction(("password", "api_key", "token")))
    reason = "down, api_key=sk_live_1 password=hunter2 see https://admin:s3cr3t@status.example/x"
    pause = gate.pause(queue="q", reason=reason, by="ops token=tok_9")
    shown = f"{pause.reason} {pause.paused_by} {gate.paused()}"
    for secret in ("sk_live_1", "hunter2", "s3cr3t", "tok_9"):
        assert secret not in shown
    assert "down," in (pause.reason or "") and "ops" in (pause.paused_by or "")
