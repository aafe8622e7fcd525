"""Acceptance: values Celery 5.7 carries that a converted app passes and returns (issue 24,
items 3 and 4), on a real worker with a Redis result backend.

- a ``pydantic=True`` task called with models receives its models: the producer dumps
  them as Celery's ``apply_async`` does (``model_dump``), the row's payload, key and
  redaction are built on that dumped form, the worker's wrapper validates them back;
- a task returning the ``AsyncResult``/``GroupResult`` of the canvas it started completes:
  Celery stores its tuple form (``as_tuple()``), and so does the row's ``result``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from celery.result import GroupResult, result_from_tuple
from compat_tasks import Login, Pages
from conftest import result_backend_worker

from celery_tracked.core.redact import REDACTED

DEADLINE_S = 30.0
pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def backend_env(env: Any, start_worker: Callable[..., Any], redis_url: str) -> Iterator[Any]:
    """The test's app and one worker, both with a Redis result backend."""
    with result_backend_worker(env, start_worker, redis_url) as made:
        yield made


def test_a_pydantic_task_receives_its_models(backend_env: Any) -> None:
    task = backend_env.task("acc.pydantic")
    login = Login(user="ada", password="s3cret")
    sent = [
        task.delay(login),
        task.apply_async(kwargs={"login": login, "pages": Pages(count=4)}),
        task.s(login).delay(),
        task.delay({"user": "bob", "password": "pw"}),  # Celery's dict form still works
    ]
    values = [r.get(timeout=DEADLINE_S) for r in sent]
    assert values == [{"count": 1}, {"count": 5}, {"count": 1}, {"count": 1}]
    seen = [backend_env.redis.get(f"seen:{r.id}").decode() for r in sent]
    assert seen[:3] == ["Login:ada:s3cret"] * 3 and seen[3] == "Login:bob:pw"
    job = backend_env.tracker.get_job(sent[1].id)
    assert job is not None and job.status.value == "completed"
    # the row holds the dumped form, its secret field redacted; the result as Celery stores it
    assert job.payload == {
        "args": [],
        "kwargs": {"login": {"user": "ada", "password": REDACTED}, "pages": {"count": 4}},
    }
    assert job.result == {"count": 5}
    assert "s3cret" not in json.dumps([job.payload, job.result])


def test_a_pydantic_task_keys_its_jobs_on_the_dumped_form(backend_env: Any) -> None:
    task = backend_env.task("acc.pydantic")
    first = task.apply_async((Login(user="ada", password="x"),), idempotency_key="login:ada")
    again = task.apply_async((Login(user="ada", password="x"),), idempotency_key="login:ada")
    assert again.id == first.id
    assert first.get(timeout=DEADLINE_S) == {"count": 1}


def test_a_task_returning_the_chain_it_started_completes(backend_env: Any) -> None:
    task = backend_env.task("acc.starts_chain")
    result = task.delay("c")
    stored = result.get(timeout=DEADLINE_S)
    job = backend_env.wait_status(result.id, "completed", "failed")
    assert (job.status.value, job.error_type) == ("completed", None)
    # what Celery stores for a returned AsyncResult: its tuple form, also the row's result
    assert job.result == stored
    chained = result_from_tuple(stored, backend_env.app)
    assert chained.get(timeout=DEADLINE_S)["x"] == "c-2"
    assert chained.parent is not None and chained.parent.get(timeout=DEADLINE_S)["x"] == "c-1"
    assert backend_env.tracker.wait(result.id, timeout=DEADLINE_S) == stored


def test_a_task_returning_the_group_it_started_completes(backend_env: Any) -> None:
    task = backend_env.task("acc.starts_group")
    result = task.delay("g")
    stored = result.get(timeout=DEADLINE_S)
    job = backend_env.wait_status(result.id, "completed", "failed")
    assert (job.status.value, job.result) == ("completed", stored)
    started = result_from_tuple(stored, backend_env.app)
    assert isinstance(started, GroupResult)
    assert [r["x"] for r in started.get(timeout=DEADLINE_S)] == ["g-a", "g-b"]
