"""The lease keeper: renewal retried on errors, a run stopped once its lease is lost or
cannot be proven, never after its body ended; what it does in a thread."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from celery_tracked import StoreError
from celery_tracked.core.jobs import Claim
from celery_tracked.services.lease import LeaseKeeper
from tests.conftest import wait_for

LEASE_S = 0.6


class Renewals:
    """A store whose renewals answer from a script: True, False (not held) or an error."""

    def __init__(self, *answers: bool | None, then: bool | None = True) -> None:
        self.answers = list(answers)
        self.then = then
        self.calls = 0

    def renew(self, claim: Claim, lease_seconds: float) -> bool:
        self.calls += 1
        answer = self.answers.pop(0) if self.answers else self.then
        if answer is None:
            raise StoreError("renewing the lease failed: server closed the connection")
        return answer


class Stops(list[str]):
    def __call__(self, why: str) -> None:
        self.append(why)


@pytest.fixture
def stops() -> Stops:
    return Stops()


@pytest.fixture
def keepers() -> Iterator[list[LeaseKeeper]]:
    made: list[LeaseKeeper] = []
    yield made
    for keeper in made:
        keeper.stop()


def keeper_of(store: Renewals, stops: Stops, keepers: list[LeaseKeeper]) -> LeaseKeeper:
    keeper = LeaseKeeper(store, LEASE_S, stop=stops)  # type: ignore[arg-type]
    keepers.append(keeper)
    return keeper


CLAIM = Claim("j-1", 1, 3)


def test_a_renewal_failing_briefly_is_retried_and_the_run_goes_on(
    stops: Stops, keepers: list[LeaseKeeper]
) -> None:
    store = Renewals(None, None)
    keeper = keeper_of(store, stops, keepers)
    with keeper.holding(CLAIM, since=time.monotonic()):
        wait_for(lambda: store.calls >= 5, timeout=5, what="renewals after the errors")
    assert stops == []


def test_a_lease_taken_over_stops_the_run(stops: Stops, keepers: list[LeaseKeeper]) -> None:
    keeper = keeper_of(Renewals(then=False), stops, keepers)
    with keeper.holding(CLAIM, since=time.monotonic()):
        wait_for(lambda: stops, timeout=5, what="the run to be stopped")
    assert "lost its lease to another attempt" in stops[0]


def test_an_unprovable_lease_stops_the_run_once_the_proof_is_too_old(
    stops: Stops, keepers: list[LeaseKeeper]
) -> None:
    keeper = keeper_of(Renewals(then=None), stops, keepers)
    since = time.monotonic()
    with keeper.holding(CLAIM, since=since):
        wait_for(lambda: stops, timeout=5, what="the run to be stopped")
        stopped_after = time.monotonic() - since
    assert "cannot prove its lease" in stops[0]
    assert stopped_after >= keeper.proof_seconds  # not at the first failed renewal
    assert keeper.proof_seconds < LEASE_S


def test_nothing_stops_a_run_whose_body_ended(stops: Stops, keepers: list[LeaseKeeper]) -> None:
    store = Renewals(then=None)
    keeper = keeper_of(store, stops, keepers)
    with keeper.holding(CLAIM, since=time.monotonic()):
        keeper.body_ended(CLAIM)
        wait_for(lambda: store.calls >= 4, timeout=5, what="renewals")
        time.sleep(keeper.proof_seconds)  # the window in which it would have stopped
    assert stops == []


def test_a_run_in_a_thread_is_never_stopped_by_ending_the_process(
    stops: Stops, keepers: list[LeaseKeeper], caplog: pytest.LogCaptureFixture
) -> None:
    store = Renewals(then=False)
    keeper = keeper_of(store, stops, keepers)

    def told() -> list[str]:
        return [r.message for r in caplog.records if "outcome will not be written" in r.message]

    def run() -> None:
        with keeper.holding(CLAIM, since=time.monotonic()):
            wait_for(told, timeout=5, what="the lost lease to be logged")
            time.sleep(0.5)  # further checks: told once, never stopped

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(10)
    assert stops == []
    assert len(told()) == 1


def test_sigcont_checks_the_lease_in_the_main_thread_at_once(
    stops: Stops, keepers: list[LeaseKeeper]
) -> None:
    """A process resumed after a pause longer than the proof window, whose lease was
    taken over meanwhile, stops at its next step: the ``SIGCONT`` handler runs before the
    body's next bytecode (its last renewal, fenced, answers "not held")."""
    keeper = keeper_of(Renewals(then=False), stops, keepers)
    previous = signal.getsignal(signal.SIGCONT)
    try:
        with keeper.holding(CLAIM, since=time.monotonic() - LEASE_S):  # "paused" a lease
            keeper.stop()  # no renewal can prove it meanwhile
            os.kill(os.getpid(), signal.SIGCONT)
            stopped_at_once = list(stops)
    finally:
        signal.signal(signal.SIGCONT, previous)
    assert len(stopped_at_once) == 1
    assert "lost its lease to another attempt" in stopped_at_once[0]


def test_an_unproven_lease_renewed_at_last_goes_on(
    stops: Stops, keepers: list[LeaseKeeper]
) -> None:
    """Issue 22, item 10: a body that held the GIL past the proof window kept the renewal
    thread away, not its lease: one fenced renewal proves it, and the run goes on."""
    store = Renewals(then=True)
    keeper = keeper_of(store, stops, keepers)
    previous = signal.getsignal(signal.SIGCONT)
    try:
        with keeper.holding(CLAIM, since=time.monotonic() - LEASE_S):
            keeper.stop()  # no periodic renewal, no watchdog: only SIGCONT's check
            os.kill(os.getpid(), signal.SIGCONT)
            assert store.calls == 1  # the renewal tried before stopping
            keeper.check()  # proven from that renewal: nothing to try again
    finally:
        signal.signal(signal.SIGCONT, previous)
    assert stops == []
    assert store.calls == 1


def test_an_unproven_lease_whose_last_renewal_fails_stops(
    stops: Stops, keepers: list[LeaseKeeper]
) -> None:
    store = Renewals(then=None)  # the database cannot be reached
    keeper = keeper_of(store, stops, keepers)
    with keeper.holding(CLAIM, since=time.monotonic() - LEASE_S):
        keeper.stop()
        keeper.check()
    assert store.calls == 1
    assert len(stops) == 1 and "cannot prove its lease" in stops[0]
