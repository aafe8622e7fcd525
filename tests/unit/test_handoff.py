"""The hand-off hook (``services/handoff.py``) on the runner, with the watched memory store of
``test_runner.py``: a job without a concurrency key costs no read and no write more; a
keyed job's end hands its slot to the key's next due waiting job and publishes it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from celery_tracked.core.hooks import HookChain
from celery_tracked.core.jobs import Job, JobStatus, utcnow
from celery_tracked.core.limits import SLOT_HANDED, DeliveryLimits
from celery_tracked.core.settings import Settings
from celery_tracked.services.handoff import SlotHandOff
from celery_tracked.services.lease import LeaseKeeper
from celery_tracked.services.runner import Runner
from tests.unit.test_runner import MemoryStore, Recorder, World

HAND_OFF = ("next_waiting", "hand_slot", "handed_over")
KEYED = ("key_busy", "key_waiting", *HAND_OFF)


class Watched(MemoryStore):
    def next_waiting(self, *args: Any, **kwargs: Any) -> list[Job]:
        self.call("next_waiting")
        return super().next_waiting(*args, **kwargs)

    def hand_slot(self, *args: Any, **kwargs: Any) -> Job | None:
        self.call("hand_slot")
        return super().hand_slot(*args, **kwargs)

    def handed_over(self, *args: Any, **kwargs: Any) -> bool:
        self.call("handed_over")
        return super().handed_over(*args, **kwargs)


@pytest.fixture
def world() -> Iterator[tuple[World, list[Job]]]:
    store, recorder, published = Watched(), Recorder(), []
    keeper = LeaseKeeper(store, lease_seconds=60)  # type: ignore[arg-type]
    hooks = HookChain([recorder, SlotHandOff(store, published.append)])
    runner = Runner(store, keeper, hooks, Settings(redis_url="memory://"))  # type: ignore[arg-type]
    yield World(store, recorder, runner), published
    keeper.stop()


def test_a_job_without_a_concurrency_key_reads_and_writes_nothing_more(
    world: tuple[World, list[Job]],
) -> None:
    w, published = world
    w.store.add("j-1")
    w.store.add("j-2", concurrency_key="k", published_at=utcnow())  # waits on another key
    w.run(job_id="j-1")
    assert w.job("j-1").status is JobStatus.COMPLETED
    assert not set(KEYED) & set(w.store.calls), w.store.calls
    assert published == [] and w.job("j-2").revision == 0


def test_a_keyed_job_hands_its_slot_to_the_next_due_waiting_job(
    world: tuple[World, list[Job]],
) -> None:
    w, published = world
    now = utcnow()
    w.store.add("j-1", concurrency_key="k")
    w.store.add(
        "not-due",
        concurrency_key="k",
        published_at=now,
        created_at=now,
        not_before=now + timedelta(hours=1),
    )
    w.store.add(
        "next", concurrency_key="k", published_at=now, created_at=now + timedelta(seconds=1)
    )
    w.store.add(
        "last", concurrency_key="k", published_at=now, created_at=now + timedelta(seconds=2)
    )
    w.run(job_id="j-1", limits=DeliveryLimits(key="k", limit=1))
    assert [j.id for j in published] == ["next"] and published[0].revision == 1
    handed = w.job("next")
    assert (handed.locked_by, handed.revision) == (SLOT_HANDED, 1)
    assert handed.published_at is not None  # marked handed over after the publish
    assert w.job("not-due").revision == 0 and w.job("last").revision == 0


class _Platform:
    """Records each publish's options (``send_job``'s); shows a value as its repr."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def show(self, value: Any, limit: int) -> str:
        return repr(value)[:limit]

    def publish(self, task_name: str, args: Any, kwargs: Any, options: dict[str, Any]) -> None:
        self.sent.append(options)


def test_a_handed_job_waits_no_more_whatever_this_hosts_clock_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The hand-off found the job due on the store's (the database's) clock: its message
    carries no countdown even when this host's clock is a minute behind (the issue 26
    trial: the rest of its due time, counted on this host's clock, delayed it by the skew,
    the handed slot idle meanwhile)."""
    from celery_tracked.services import rerun

    store, platform = Watched(), _Platform()
    keeper = LeaseKeeper(store, lease_seconds=60)  # type: ignore[arg-type]
    hand_off = SlotHandOff(store, rerun.publisher(platform, None))  # type: ignore[arg-type]
    runner = Runner(store, keeper, HookChain([hand_off]), Settings(redis_url="memory://"))  # type: ignore[arg-type]
    w = World(store, Recorder(), runner)
    now = utcnow()
    w.store.add("j-1", concurrency_key="k")
    w.store.add("due", concurrency_key="k", published_at=now, not_before=now - timedelta(seconds=1))
    behind = timedelta(minutes=1)
    monkeypatch.setattr(rerun, "utcnow", lambda: utcnow() - behind)  # this host, behind
    try:
        w.run(job_id="j-1", limits=DeliveryLimits(key="k", limit=1))
    finally:
        keeper.stop()
    assert w.job("due").locked_by == SLOT_HANDED
    assert len(platform.sent) == 1 and "countdown" not in platform.sent[0], platform.sent
