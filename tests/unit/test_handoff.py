"""``KeyHandoff``: a keyed attempt whose outcome was written hands its slot to the key's
next waiting job (its message published again); nothing else does."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

from celery_tracked.backends.memory import MemoryStore
from celery_tracked.core.jobs import Job, utcnow
from celery_tracked.core.limits import DeliveryLimits
from celery_tracked.services.handoff import KeyHandoff
from tests.contract.conftest import job_row


def attempt(job_id: str, key: str | None, recorded: str | None = "completed") -> Any:
    limits = DeliveryLimits(key=key, limit=1) if key is not None else None
    return SimpleNamespace(job_id=job_id, run=SimpleNamespace(limits=limits), recorded=recorded)


def waiting(store: MemoryStore, key: str, **values: Any) -> str:
    row = job_row(concurrency_key=key, **values)
    store.insert(row)
    store.handed_over(row["id"], utcnow())
    return str(row["id"])


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


def test_an_ended_keyed_run_publishes_the_keys_next_job(store: MemoryStore) -> None:
    sent: list[Job] = []
    ended, following = waiting(store, "k"), waiting(store, "k")
    KeyHandoff(store, sent.append).after_attempt(attempt(ended, "k"))
    assert [j.id for j in sent] == [following]


@pytest.mark.parametrize(
    ("key", "recorded"), [(None, "completed"), ("k", None)], ids=["not keyed", "not recorded"]
)
def test_no_handoff_without_a_key_or_before_the_outcome_is_written(
    store: MemoryStore, key: str | None, recorded: str | None
) -> None:
    sent: list[Job] = []
    ended = waiting(store, "k")
    waiting(store, "k")
    KeyHandoff(store, sent.append).after_attempt(attempt(ended, key, recorded))
    assert sent == []


def test_a_redacted_payload_waits_for_its_own_message(store: MemoryStore) -> None:
    sent: list[Job] = []
    ended = waiting(store, "k")
    waiting(store, "k", payload_json='{"args": [], "kwargs": {"token": "[redacted]"}}')
    KeyHandoff(store, sent.append).after_attempt(attempt(ended, "k"))
    assert sent == []


def test_a_failed_publish_is_logged_and_not_raised(
    store: MemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(job: Job) -> None:
        raise ConnectionError("redis://:secret@broker down")

    ended, following = waiting(store, "k"), waiting(store, "k")
    with caplog.at_level(logging.WARNING, logger="celery_tracked"):
        KeyHandoff(store, broken).after_attempt(attempt(ended, "k"))
    assert any(following in r.getMessage() for r in caplog.records)
    assert not any("secret" in r.getMessage() for r in caplog.records)
