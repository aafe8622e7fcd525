"""The undo of a debounce replacement whose publish failed (issue 12, item 2), checked on a
small model of the row, the broker and the relay over every interleaving.

The producer replaced the arguments of a pending job (revision 0 → 1); its publish of the
replacement fails (its message may or may not have reached the broker), then it undoes.
Meanwhile the previous message (revision 0) may be delivered at any moment (it runs if the
row is at its revision, else it is skipped and consumed), and the relay may take and
publish an unpublished row at any moment. Whatever the order, once everything settled the
job must have run exactly once, with the arguments its row held for that revision.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import pytest

from celery_tracked.core.jobs import JobStatus
from celery_tracked.core.keys import UndoneReplace, undo_replace
from tests.unit.job_rows import a_job

OLD, NEW = '{"args": [], "kwargs": {"n": 0}}', '{"args": [], "kwargs": {"n": 1}}'
Decide = Callable[[int, bool], tuple[int, str, bool]]


@dataclass(frozen=True)
class World:
    # the row
    pending: bool = True
    revision: int = 1  # the replacement already made revision 1
    payload: str = NEW
    published: bool = False
    relay_holds: tuple[int, str] | None = None
    # the broker: messages not consumed yet, as (revision, arguments)
    queued: frozenset[tuple[int, str]] = frozenset({(0, OLD)})
    # the producer's remaining steps, and what ran
    producer: tuple[str, ...] = ("publish fails", "undo")
    ran: tuple[tuple[int, str], ...] = ()


def moves(world: World, leaked: bool, decide: Decide) -> Iterator[World]:
    """Every next state (``leaked``: the failed publish reached the broker anyway)."""
    if world.producer:
        step, rest = world.producer[0], world.producer[1:]
        if step == "publish fails":
            queued = world.queued | {(1, NEW)} if leaked else world.queued
            yield replace(world, producer=rest, queued=queued)
        elif step == "undo":
            # the store's fence: pending at the revision it made, nobody handed it over
            fenced = world.pending and world.revision == 1
            if fenced and not world.published and world.relay_holds is None:
                revision, payload, published = decide(0, True)
                world = replace(world, revision=revision, payload=payload, published=published)
            yield replace(world, producer=rest)
    for message in world.queued:
        left = replace(world, queued=world.queued - {message})
        if world.pending and message[0] == world.revision:  # the claim is revision-fenced
            yield replace(left, pending=False, ran=(*world.ran, message))
        else:
            yield left  # skipped as stale (or the job already ran): consumed
    if world.pending and not world.published and world.relay_holds is None:
        yield replace(world, relay_holds=(world.revision, world.payload))
    if world.relay_holds is not None:
        sent = world.relay_holds
        published = world.published or sent[0] == world.revision
        yield replace(world, relay_holds=None, queued=world.queued | {sent}, published=published)


def settled_worlds(leaked: bool, decide: Decide) -> list[World]:
    """The states no move leaves: everything that could happen happened."""
    seen: set[World] = set()
    ends: list[World] = []
    stack = [World()]
    while stack:
        world = stack.pop()
        if world in seen:
            continue
        seen.add(world)
        following = list(moves(world, leaked, decide))
        if not following:
            ends.append(world)
        stack.extend(following)
    return ends


def this_decision(previous_revision: int, previous_published: bool) -> tuple[int, str, bool]:
    previous = a_job(revision=previous_revision, payload_json=OLD, status=JobStatus.PENDING)
    undo: UndoneReplace = undo_replace(previous, made=previous_revision + 1)
    assert undo.payload_json is not None
    return undo.revision, undo.payload_json, False  # the store leaves it unpublished


def going_back(previous_revision: int, previous_published: bool) -> tuple[int, str, bool]:
    """The undo before this fix: the previous revision, arguments and hand-over back."""
    return previous_revision, OLD, previous_published


def runs(world: World) -> list[str]:
    return [payload for _, payload in world.ran]


@pytest.mark.parametrize("leaked", [False, True], ids=["publish-lost", "publish-leaked"])
def test_every_interleaving_runs_the_job_exactly_once(leaked: bool) -> None:
    ends = settled_worlds(leaked, this_decision)
    assert ends
    for world in ends:
        assert len(world.ran) == 1, world
        assert not world.pending and not world.queued and world.relay_holds is None, world
    # the undo's outcome when it applied: the previous arguments, by the relay's message
    assert {tuple(runs(w)) for w in ends} == {(OLD,), (NEW,)}


def test_the_relay_runs_the_previous_arguments_when_the_undo_applied() -> None:
    """The case of the issue: the old message was skipped before the undo, the replacement
    never reached the broker. The job runs once, with its previous arguments."""
    world = World()
    world = replace(world, queued=frozenset())  # the old message: skipped as stale
    world = replace(world, producer=("undo",))  # the publish failed, nothing sent
    ends: list[World] = []
    stack = [world]
    while stack:
        w = stack.pop()
        following = list(moves(w, False, this_decision))
        ends.extend([w] if not following else [])
        stack.extend(following)
    assert {tuple(runs(w)) for w in ends} == {(OLD,)}
    assert all(w.revision == 2 for w in ends)


def test_going_back_to_the_previous_revision_can_leave_a_job_that_never_runs() -> None:
    """The model finds the issue's defect in the old decision: the old message consumed
    (skipped) while the row held revision 1, then the undo restores revision 0 marked
    handed over: pending, no message, and nothing the relay would look at."""
    stuck = [w for w in settled_worlds(False, going_back) if not w.ran]
    assert stuck
    assert all(w.pending and w.published and w.revision == 0 for w in stuck)


def test_undo_replace_never_gives_an_older_revision_back() -> None:
    for previous_revision in (0, 1, 7):
        previous = a_job(revision=previous_revision, payload_json=OLD)
        undo = undo_replace(previous, made=previous_revision + 1)
        assert undo.revision == previous_revision + 2
        assert undo.payload_json == OLD
