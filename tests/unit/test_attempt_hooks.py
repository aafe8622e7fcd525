"""Hooks receive what they act on: the attempt (and, through it, the step) as arguments.

No context variable carries the running attempt: the ``Runner`` makes it, hands it to
each hook's ``running`` block, ``completion_rows``/``failure_rows`` and ``after_attempt``,
and to the body; the adapter keeps it on Celery's own request (``request_state.py``).
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from types import SimpleNamespace
from typing import Any

import pytest

from celery_tracked.adapter.request_state import attempt_of, body_call, part
from celery_tracked.core.attempt import Attempt
from celery_tracked.core.hooks import HookChain, Hooks
from celery_tracked.core.jobs import Claim, NewRow
from celery_tracked.core.messages import TrackedHeaders
from celery_tracked.core.run import Run
from celery_tracked.services.pipelines import Declared, Step, Successors


def an_attempt(job_id: str = "j-1", number: int = 1, inline: bool = False) -> Attempt:
    headers = TrackedHeaders(job_id, "corr-1")
    run = Run(headers, "app.send", "send", "q", "w", 1000, lambda: [], inline=inline)
    return Attempt(run, Claim(job_id, number, 3))


class Note:
    """What a hook attaches for the body."""

    def __init__(self, name: str) -> None:
        self.name = name


class Recording(Hooks):
    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log
        self.seen: list[Attempt] = []

    @contextmanager
    def running(self, attempt: Attempt) -> Iterator[None]:
        self.seen.append(attempt)
        self.log.append(f"{self.name} enters {attempt.job_id}")
        attempt.attach(Note(self.name))
        try:
            yield
        finally:
            self.log.append(f"{self.name} leaves")

    def completion_rows(self, attempt: Attempt, result: Any) -> Sequence[NewRow]:
        self.seen.append(attempt)
        return [NewRow("background_job_events", {"job": attempt.job_id, "result": result})]

    def after_attempt(self, attempt: Attempt) -> None:
        self.seen.append(attempt)
        self.log.append(f"{self.name} after {attempt.recorded}")


def test_the_base_hooks_wrap_nothing_and_hear_nothing() -> None:
    attempt = an_attempt()
    with Hooks().running(attempt):
        pass
    assert Hooks().after_attempt(attempt) is None
    assert list(Hooks().failure_rows(attempt, ValueError())) == []


def test_every_hook_gets_the_attempt_it_acts_on_in_registration_order() -> None:
    log: list[str] = []
    first, second = Recording("a", log), Recording("b", log)
    chain = HookChain([first, second])
    attempt = an_attempt("j-7")
    with chain.running(attempt):
        log.append("body")
    rows = chain.completion_rows(attempt, 42)
    attempt.recorded = "completed"
    chain.after_attempt(attempt)
    assert log == [
        "a enters j-7",
        "b enters j-7",
        "body",
        "b leaves",
        "a leaves",
        "a after completed",
        "b after completed",
    ]
    assert rows == [NewRow("background_job_events", {"job": "j-7", "result": 42})] * 2
    assert all(seen is attempt for seen in first.seen + second.seen)


def test_what_a_hook_attaches_is_found_by_its_class_and_only_on_its_attempt() -> None:
    attempt, other = an_attempt("j-1"), an_attempt("j-2")
    attempt.attach(Note("mine"))
    found = attempt.part(Note)
    assert found is not None and found.name == "mine"
    assert other.part(Note) is None
    assert attempt.part(Step) is None


class Broken(Hooks):
    def __init__(self, where: str) -> None:
        self.where = where

    @contextmanager
    def running(self, attempt: Attempt) -> Iterator[None]:
        if self.where == "enter":
            raise RuntimeError("hook bug entering")
        yield
        if self.where == "leave":
            raise RuntimeError("hook bug leaving")

    def after_attempt(self, attempt: Attempt) -> None:
        raise RuntimeError("hook bug after")


@pytest.mark.parametrize("where", ["enter", "leave"])
def test_a_hook_that_fails_around_the_body_is_logged_and_never_replaces_its_error(
    where: str, caplog: pytest.LogCaptureFixture
) -> None:
    log: list[str] = []
    chain = HookChain([Broken(where), Recording("ok", log)])
    attempt = an_attempt()
    with caplog.at_level(logging.ERROR, logger="celery_tracked"):
        with chain.running(attempt):
            log.append("body")  # the body runs, the other hook's block too
        with pytest.raises(KeyError, match="the body's"), chain.running(attempt):
            raise KeyError("the body's")
        chain.after_attempt(attempt)  # logged; the next hook still hears
    assert log.count("body") == 1 and log.count("ok leaves") == 2
    assert log[-1] == "ok after None"
    assert any("hook" in r.getMessage() and r.exc_info for r in caplog.records)


# -- the pipelines hook: its step comes from the attempt it is given -------------------


def test_the_successors_hook_attaches_a_step_per_attempt() -> None:
    hook = Successors(None, None, None)  # type: ignore[arg-type]  # no row is read here
    attempt, other = an_attempt("j-1"), an_attempt("j-2")
    with hook.running(attempt) as step, hook.running(other) as other_step:
        assert attempt.part(Step) is step and other.part(Step) is other_step
        assert (step.job_id, step.correlation_id) == ("j-1", "corr-1")
    assert hook.completion_rows(attempt, None) == []  # nothing declared
    assert list(hook.completion_rows(an_attempt("j-3"), None)) == []  # no step: not its run


class Rows:
    """The two store calls of a successor's publish: its row exists; its hand-over."""

    def __init__(self) -> None:
        self.handed: list[str] = []

    def get(self, job_id: str) -> object:
        return object()

    def handed_over(self, job_id: str, now: Any, attempts: int) -> None:
        self.handed.append(job_id)


def declared(job_id: str, sent: list[str], then: Any = None) -> Declared:
    def publish() -> None:  # an inline run (eager mode): the successor runs right here
        sent.append(job_id)
        if then is not None:
            then()

    return Declared(SimpleNamespace(job_id=job_id), False, publish)  # type: ignore[arg-type]


def test_nothing_is_published_unless_the_attempt_s_write_committed() -> None:
    sent: list[str] = []
    store = Rows()
    hook = Successors(store, None, None)  # type: ignore[arg-type]
    attempt = an_attempt()
    with hook.running(attempt) as step:
        step.written = [declared("s-1", sent)]
    hook.after_attempt(attempt)  # no write committed (the lease was lost)
    attempt.recorded = "retrying"
    hook.after_attempt(attempt)
    assert sent == []
    attempt.recorded = "completed"
    hook.after_attempt(attempt)
    hook.after_attempt(attempt)  # once
    assert sent == ["s-1"] and store.handed == ["s-1"]


def test_an_inline_pipeline_is_published_by_one_loop_not_a_recursion() -> None:
    """Eager mode: each successor runs inside its step's publish; its own successors join
    the outer loop (found by the job id of the attempt the hook is given)."""
    sent: list[str] = []
    hook = Successors(Rows(), None, None)  # type: ignore[arg-type]
    depth: list[int] = []
    deepest: list[int] = []

    def run_step(job_id: str, successor: str | None) -> None:
        depth.append(len(depth))
        deepest.append(len(depth))
        attempt = an_attempt(job_id, inline=True)
        with hook.running(attempt) as step:
            if successor is not None:
                nxt = successor_of(successor)
                step.written = [declared(successor, sent, lambda: run_step(successor, nxt))]
        attempt.recorded = "completed"
        hook.after_attempt(attempt)
        depth.pop()

    def successor_of(job_id: str) -> str | None:
        number = int(job_id.split("-")[1]) + 1
        return f"s-{number}" if number <= 50 else None

    run_step("s-0", "s-1")
    assert sent == [f"s-{n}" for n in range(1, 51)]
    assert max(deepest) == 2  # each successor runs inside the first step's loop only


# -- the adapter: the attempt on Celery's own request ----------------------------------


class Request:
    """Celery's request context, as far as the adapter uses it."""

    retries = 0


def test_the_body_s_calls_reach_its_attempt_through_its_request_only_while_it_runs() -> None:
    request, elsewhere = Request(), Request()  # elsewhere: another task's request
    attempt = an_attempt(number=2)
    attempt.attach(Note("reporter"))
    seen: list[Any] = []

    def body(x: int) -> int:
        other = part(elsewhere, Note, "app.other")  # another task called from this body
        seen.append((attempt_of(request), part(request, Note), other))
        seen.append(request.retries)
        return x + 1

    assert attempt_of(request) is None
    assert body_call(request, body, (1,), {})(attempt) == 2
    (running, note, other), retries = seen
    assert running is attempt and note is not None and note.name == "reporter"
    assert other is None and retries == 1  # Celery's count: the retries before it
    assert attempt_of(request) is None and part(request, Note) is None  # cleared after


def test_a_thread_the_body_starts_sees_its_attempt_only_in_the_body_s_context() -> None:
    """Celery's request is per thread: a thread started plainly finds nothing, as before;
    one started in the body's context (``copy_context().run``) reaches the body's attempt,
    as before, and only for the body's own task. The progress flusher, a thread of the
    library, holds its reporter itself."""
    from celery import Celery, Task

    app = Celery("t", set_as_current=False)

    @app.task(bind=True, shared=False)
    def noted(self: Task[Any, Any]) -> list[Any]:
        attempt = Attempt(replace(an_attempt().run, task_name=self.name), Claim("j-1", 1, 3))
        attempt.attach(Note("here"))
        found: list[Any] = []

        def look() -> None:
            mine, other = part(self.request, Note, self.name), part(self.request, Note, "other")
            found.append((mine and mine.name, other and other.name))

        def in_threads() -> None:
            look()  # the body's thread: its request
            for target in (look, partial(contextvars.copy_context().run, look)):
                thread = threading.Thread(target=target)
                thread.start()
                thread.join()

        body_call(self.request, in_threads, (), {})(attempt)
        look()  # after the body: nothing
        return found

    assert noted.apply().get() == [
        ("here", "here"),  # the request itself holds it (whichever task name)
        (None, None),  # a plain thread: no request, no context
        ("here", None),  # the body's context: its own task only
        (None, None),
    ]
