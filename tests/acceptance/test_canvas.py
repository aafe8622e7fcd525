"""Acceptance: Celery canvases with idempotency keys never hang (docs/usage.md, "Canvas").

A signature deduplicated inside a ``group``, ``chain`` or ``chord`` would publish nothing
under the task id Celery froze for it, and the canvas would wait forever: the call raises
``DuplicateInCanvas`` instead. Canvases without a duplicate complete. Every test has a
deadline: the canvas either raises at the call or completes within ``DEADLINE_S``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from celery import chain, chord, group
from conftest import result_backend_worker

from celery_tracked import DuplicateInCanvas, EnqueueError
from tests.conftest import wait_for

DEADLINE_S = 30.0
pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def canvas_env(env: Any, start_worker: Callable[..., Any], redis_url: str) -> Iterator[Any]:
    """The test's app and one worker, both with a Redis result backend (canvases wait on
    their members' results)."""
    with result_backend_worker(env, start_worker, redis_url) as made:
        yield made


def rows(env: Any, task_name: str) -> int:
    query = "SELECT count(*) FROM background_jobs WHERE task_name = :name"
    return int(env.sql(query, name=task_name)[0][0])


def test_a_group_without_duplicates_completes(canvas_env: Any) -> None:
    keyed = canvas_env.task("acc.keyed")
    result = group(keyed.s("ga"), keyed.s("gb")).apply_async()
    assert [r["x"] for r in result.get(timeout=DEADLINE_S)] == ["ga", "gb"]
    assert rows(canvas_env, "acc.keyed") == 2


def test_a_group_with_a_duplicate_key_raises_at_the_call(canvas_env: Any) -> None:
    keyed = canvas_env.task("acc.keyed")
    with pytest.raises(DuplicateInCanvas) as raised:
        group(keyed.s("gdup"), keyed.s("gdup")).apply_async()
    error = raised.value
    assert isinstance(error, EnqueueError) and error.retryable is False
    # the member sent before the duplicate was enqueued, and it runs (documented)
    job = canvas_env.wait_status(error.job_id, "completed", "failed", timeout=DEADLINE_S)
    assert job.status.value == "completed"
    assert error.task_id != error.job_id
    assert rows(canvas_env, "acc.keyed") == 1


def test_a_chain_completes_and_a_chain_whose_first_key_was_used_raises(canvas_env: Any) -> None:
    keyed, succeed = canvas_env.task("acc.keyed"), canvas_env.task("acc.succeed")
    done = chain(keyed.si("c1"), succeed.si("after c1")).apply_async()
    assert done.get(timeout=DEADLINE_S)["x"] == "after c1"
    first = canvas_env.sql("SELECT id FROM background_jobs WHERE task_name = 'acc.keyed'")[0][0]

    with pytest.raises(DuplicateInCanvas) as raised:
        chain(keyed.si("c1"), succeed.si("never")).apply_async()
    assert raised.value.job_id == first
    # nothing of the refused chain was published
    assert rows(canvas_env, "acc.keyed") == 1 and rows(canvas_env, "acc.succeed") == 1
    wait_for(canvas_env.broker_empty, timeout=10, what="the broker to be empty")


def test_a_chord_completes_and_a_chord_with_duplicate_header_keys_raises(
    canvas_env: Any,
) -> None:
    keyed, succeed = canvas_env.task("acc.keyed"), canvas_env.task("acc.succeed")
    done = chord([keyed.si("h1"), keyed.si("h2")], succeed.si("body")).apply_async()
    assert done.get(timeout=DEADLINE_S)["x"] == "body"

    with pytest.raises(DuplicateInCanvas):
        chord([keyed.si("h3"), keyed.si("h3")], succeed.si("never")).apply_async()
    with pytest.raises(DuplicateInCanvas):  # a header key used before the chord
        chord([keyed.si("h1")], succeed.si("never")).apply_async()
    wait_for(canvas_env.broker_empty, timeout=10, what="the broker to be empty")
    assert rows(canvas_env, "acc.succeed") == 1  # no body of a refused chord ran


def test_a_plain_duplicate_outside_a_canvas_still_returns_the_existing_job(
    canvas_env: Any,
) -> None:
    keyed = canvas_env.task("acc.keyed")
    first = keyed.apply_async(("p1",))
    again = keyed.apply_async(("p1",))
    assert again.id == first.id
    assert again.get(timeout=DEADLINE_S)["x"] == "p1"
