"""Hooks: no-ops by default, chained in order, and the two built-ins."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import pytest

from celery_tracked.core.attempt import Attempt
from celery_tracked.core.errors import StoreError, TrackedError
from celery_tracked.core.hooks import (
    Delivery,
    HookChain,
    Hooks,
    LogTransitions,
    NotifyTerminal,
    Transition,
)
from celery_tracked.core.jobs import Claim, NewRow
from celery_tracked.core.messages import TrackedHeaders
from celery_tracked.core.run import Run

DELIVERY = Delivery("j-1", "send", "q", "app.send")
CLAIM = Claim("j-1", 1, 3)
RUN = Run(TrackedHeaders("j-1"), "app.send", "send", "q", "w", 1000, lambda: [])
ATTEMPT = Attempt(RUN, CLAIM)


def transition(event: str, **changes: Any) -> Transition:
    values: dict[str, Any] = {
        "job_id": "j-1",
        "event": event,
        "status": event,
        "message": f"job j-1 {event}",
        "queue": "q",
        "job_type": "send",
        "attempt": 1,
        "duration_ms": 12,
    }
    values.update(changes)
    return Transition(**values)


class Recording(Hooks):
    def __init__(self, name: str, log: list[str], delay: float | None = None) -> None:
        self.name, self.log, self.delay = name, log, delay

    def before_claim(self, delivery: Delivery) -> float | None:
        self.log.append(f"{self.name}.before_claim")
        return self.delay

    def completion_rows(self, attempt: Attempt, result: Any) -> Sequence[NewRow]:
        return [NewRow("background_job_events", {"hook": self.name, "result": result})]

    def after_transition(self, transition: Transition) -> None:
        self.log.append(f"{self.name}.{transition.event}")


def test_the_base_hooks_do_nothing() -> None:
    hooks = Hooks()
    assert hooks.before_claim(DELIVERY) is None
    assert list(hooks.completion_rows(ATTEMPT, 1)) == []
    assert hooks.after_transition(transition("completed")) is None


def test_an_empty_chain_does_nothing() -> None:
    chain = HookChain()
    assert chain.before_claim(DELIVERY) is None
    assert chain.completion_rows(ATTEMPT, 1) == []


def test_the_first_postponement_wins_and_stops_the_chain() -> None:
    log: list[str] = []
    chain = HookChain(
        [Recording("a", log), Recording("b", log, delay=2.0), Recording("c", log, delay=9.0)]
    )
    assert chain.before_claim(DELIVERY) == 2.0
    assert log == ["a.before_claim", "b.before_claim"]


def test_a_zero_postponement_still_postpones() -> None:
    chain = HookChain([Recording("a", [], delay=0.0), Recording("b", [], delay=5.0)])
    assert chain.before_claim(DELIVERY) == 0.0


def test_completion_rows_of_every_hook_in_order() -> None:
    chain = HookChain([Recording("a", []), Hooks()])
    chain.add(Recording("b", []))
    assert chain.completion_rows(ATTEMPT, 7) == [
        NewRow("background_job_events", {"hook": "a", "result": 7}),
        NewRow("background_job_events", {"hook": "b", "result": 7}),
    ]


class Broken(Hooks):
    def after_transition(self, transition: Transition) -> None:
        raise RuntimeError("hook bug")


def test_a_failing_hook_is_logged_and_the_others_still_hear(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log: list[str] = []
    chain = HookChain([Broken(), Recording("after", log)])
    with caplog.at_level(logging.ERROR, logger="celery_tracked"):
        chain.after_transition(transition("completed"))
    assert log == ["after.completed"]
    assert any("hook" in r.getMessage() and r.exc_info for r in caplog.records)


class Notifier:
    def __init__(self, error: Exception | None = None) -> None:
        self.published: list[tuple[str, str]] = []
        self.error = error

    def publish(self, job_id: str, status: str) -> None:
        if self.error is not None:
            raise self.error
        self.published.append((job_id, status))

    def subscribe(self, job_id: str) -> Any:
        raise NotImplementedError


def test_only_terminal_transitions_are_notified() -> None:
    notifier = Notifier()
    hook = NotifyTerminal(notifier)
    for event in (
        "enqueued",
        "processing",
        "retrying",
        "completed",
        "failed",
        "cancelled",
        "busy",
        "skipped",
        "lease_lost",
        "error",
    ):
        hook.after_transition(transition(event))
    assert notifier.published == [("j-1", "completed"), ("j-1", "failed"), ("j-1", "cancelled")]


def test_a_notification_that_cannot_be_sent_is_only_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hook = NotifyTerminal(Notifier(StoreError("redis gone")))
    with caplog.at_level(logging.WARNING, logger="celery_tracked"):
        hook.after_transition(transition("completed"))
    assert "notification not sent" in caplog.text and "redis gone" in caplog.text
    assert issubclass(StoreError, TrackedError)


def test_each_transition_is_one_structured_log_record(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="celery_tracked"):
        LogTransitions().after_transition(transition("retrying", level=logging.WARNING))
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert record.getMessage() == "job j-1 retrying"
    extra = {k: getattr(record, k) for k in ("queue", "job_type", "job_id", "status")}
    assert extra == {"queue": "q", "job_type": "send", "job_id": "j-1", "status": "retrying"}
    assert (record.attempt, record.duration_ms) == (1, 12)
