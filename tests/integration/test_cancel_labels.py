"""A cancelled waiting job's transition carries its queue and job type (the log record's
``extra`` fields and the metrics' labels), whoever cancelled it."""

from __future__ import annotations

from typing import Any

import pytest

from celery_tracked import Tracker, tracked_task
from celery_tracked.core.hooks import Hooks, Transition

from .conftest import AppFactory

pytestmark = pytest.mark.filterwarnings("ignore::celery.exceptions.DuplicateTaskNameWarning")


class Heard(Hooks):
    def __init__(self) -> None:
        self.transitions: list[Transition] = []

    def after_transition(self, transition: Transition) -> None:
        self.transitions.append(transition)


def test_cancel_and_cancel_many_label_the_transition(make_app: AppFactory) -> None:
    app = make_app()

    @tracked_task(app=app, name="labels.report", queue="reports", job_type="report", shared=False)
    def report(x: Any) -> Any:
        return x

    tracker = Tracker.for_app(app)
    heard = Heard()
    tracker.add_hook(heard)
    one = report.enqueue(x=1).job_id
    report.enqueue(x=2)
    assert tracker.cancel(one)
    assert len(tracker.cancel_many(queue="reports").changed) == 1
    cancels = [t for t in heard.transitions if t.event == "cancelled"]
    assert len(cancels) == 2
    assert {(t.queue, t.job_type) for t in cancels} == {("reports", "report")}
