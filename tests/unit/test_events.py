"""Issue 14 item 5: transitions are built by one factory from an enum of events whose
strings are those stored in ``background_job_events.event``."""

from __future__ import annotations

import logging
import pathlib
import re

import celery_tracked
from celery_tracked.core.hooks import Transition
from celery_tracked.core.jobs import RETRY_UNDONE, Event, JobStatus
from celery_tracked.store import reports, statements, transitions

PACKAGE = pathlib.Path(celery_tracked.__file__).parent


def test_the_factory_defaults_the_status_to_the_event() -> None:
    busy = Transition.of(Event.BUSY, "j-1", "job j-1 busy", queue="q", attempt=2)
    assert (busy.event, busy.status, busy.queue, busy.attempt) == ("busy", "busy", "q", 2)
    assert busy.level == logging.INFO and busy.details == {}
    retried = Transition.of(Event.RETRIED, "j-1", "m", status=JobStatus.PENDING)
    assert retried.status == "pending" and type(retried.status) is str
    assert f"{retried.event}" == str(retried.event) == "retried"


def test_stored_event_names_are_members() -> None:
    stored = {
        statements.RESCUED,
        statements.RETRIED,
        reports.LOG_EVENT,
        RETRY_UNDONE,
    }
    stored |= {m.event for m in transitions.MOVES}
    # stored, never told to a hook (no member, as before the moves were in one table)
    stored.discard(transitions.UNDO_REPLACE.event)
    assert {s for s in stored if s} <= {e.value for e in Event}


def test_every_transition_is_built_by_the_factory() -> None:
    direct = [
        f"{path.relative_to(PACKAGE)}"
        for path in PACKAGE.rglob("*.py")
        if re.search(r"\bTransition\(", path.read_text()) and path.name != "hooks.py"
    ]
    assert direct == []
