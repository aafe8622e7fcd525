"""The body's own transaction (``Attempt.held``, ``TrackedTask.transaction``): the
completion is written in it; every other outcome rolls it back before it is written."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from celery_tracked.core.attempt import Attempt
from celery_tracked.core.errors import TransactionFailed
from celery_tracked.core.fences import Completion
from celery_tracked.core.hooks import HookChain
from celery_tracked.core.jobs import Claim, JobStatus
from celery_tracked.core.outcomes import Completed, Failed, Retrying, Skipped
from celery_tracked.core.settings import Settings
from celery_tracked.services.lease import LeaseKeeper
from celery_tracked.services.runner import Runner
from tests.unit.test_runner import MemoryStore, Recorder, World


@pytest.fixture
def world() -> Iterator[World]:
    """``test_runner``'s world: a memory store, a recording hook, a runner."""
    store = MemoryStore()
    recorder = Recorder()
    keeper = LeaseKeeper(store, lease_seconds=60)  # type: ignore[arg-type]
    runner = Runner(store, keeper, HookChain([recorder]), Settings(redis_url="memory://"))  # type: ignore[arg-type]
    yield World(store, recorder, runner)
    keeper.stop()


class Held:
    locks_writer = False

    def __init__(self, world: World, saved: bool = True) -> None:
        self.world, self.saved = world, saved
        self.calls: list[str] = []

    def complete(self, claim: Claim, done: Completion) -> bool:
        self.calls.append("complete")
        if self.saved:  # as the SQL store does: the fenced move, in this transaction
            return self.world.store.complete(claim, done)
        return False

    def abandon(self) -> None:
        # never after an outcome was written: the rollback comes first
        assert self.world.job().status is JobStatus.PROCESSING
        self.calls.append("abandon")


def holding(held: Held, then: Any = None) -> Any:
    def body(running: Attempt) -> Any:
        running.held = held
        if isinstance(then, BaseException):
            raise then
        return then

    return body


def test_the_completion_is_written_in_the_held_transaction(world: World) -> None:
    world.store.add()
    held = Held(world)
    assert world.run_attempt(holding(held, 7)) == Completed(7)
    assert held.calls == ["complete"] and world.job().status is JobStatus.COMPLETED


def test_a_body_that_raises_after_its_block_rolls_back_first(world: World) -> None:
    world.store.add()
    held = Held(world)
    assert isinstance(world.run_attempt(holding(held, ValueError("x"))), Retrying)
    assert held.calls == ["abandon"] and world.job().status is JobStatus.RETRYING


def test_a_refused_fence_commits_nothing(world: World) -> None:
    world.store.add()
    held = Held(world, saved=False)
    assert isinstance(world.run_attempt(holding(held, 1)), Skipped)
    assert held.calls == ["complete"]
    assert world.recorder.events[-1] == "lease_lost"


def test_a_failing_completion_rows_hook_rolls_back_first(world: World) -> None:
    world.store.add()
    held = Held(world)

    def boom(*_: Any) -> Any:
        raise ValueError("hook")

    world.recorder.completion_rows = boom  # type: ignore[method-assign]
    world.run_attempt(holding(held, 1))
    assert held.calls == ["abandon"]


class FailingHeld(Held):
    def complete(self, claim: Claim, done: Completion) -> bool:
        self.calls.append("complete")
        raise TransactionFailed("the body's transaction failed: terminating connection")


@pytest.mark.parametrize("max_attempts", [1, 2])
def test_a_held_transaction_that_failed_is_a_counted_failure(
    world: World, max_attempts: int
) -> None:
    world.store.add(max_attempts=max_attempts)
    verdict = world.run_attempt(holding(FailingHeld(world), 1))
    job = world.job()
    assert job.error_type == "TransactionFailed" and job.attempts_made == 1
    assert job.error_message is not None and "transaction failed" in job.error_message
    if max_attempts == 1:
        assert isinstance(verdict, Failed) and job.status is JobStatus.FAILED
    else:
        assert isinstance(verdict, Retrying) and job.status is JobStatus.RETRYING
