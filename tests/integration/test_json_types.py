"""Celery's JSON types through a real broker message and a real database (PG and SQLite):
the arguments are accepted at enqueue, reach the body with their types, are stored in
kombu's tagged form, and the body's result comes back typed through ``Tracker.wait``."""

from __future__ import annotations

import base64
import json
import uuid
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import redis
from kombu.utils.json import loads

from celery_tracked import tracked_task
from celery_tracked.core.messages import TrackedHeaders
from celery_tracked.core.outcomes import Completed
from celery_tracked.core.redact import REDACTED
from celery_tracked.core.run import Run

from .conftest import AppFactory, queue_messages, tracker_of

AT = datetime(2024, 5, 1, 12, 30, 15, 250, tzinfo=UTC)
DAY = date(2024, 5, 2)
AMOUNT = Decimal("19.90")
ID = uuid.UUID("12345678-1234-5678-1234-567812345678")


def delivered_call(broker: redis.Redis, queue: str) -> tuple[list[Any], dict[str, Any]]:
    """The arguments of the one message on ``queue``, decoded as a worker decodes them."""
    (raw,) = queue_messages(broker, queue)
    message = json.loads(raw)
    assert message["content-type"] == "application/json"
    args, kwargs, _embed = loads(base64.b64decode(message["body"]))
    return args, kwargs


def test_celerys_json_types_go_in_as_arguments_and_come_back_from_wait(
    make_app: AppFactory, broker: redis.Redis
) -> None:
    app = make_app()

    @tracked_task(app=app, queue="q")
    def invoice(at: datetime, day: date, amount: Decimal, id: uuid.UUID, token: uuid.UUID) -> Any:
        return {"at": at, "day": day, "total": amount * 2, "id": id, "types": [type(at).__name__]}

    secret = uuid.uuid4()
    job_id = invoice.enqueue(AT, DAY, amount=AMOUNT, id=ID, token=secret).job_id
    tracker = tracker_of(app)

    stored = tracker.get_job(job_id)
    assert stored is not None and stored.payload_json is not None
    assert stored.payload == {
        "args": [AT, DAY],
        "kwargs": {"amount": AMOUNT, "id": ID, "token": REDACTED},
    }
    assert json.loads(stored.payload_json)["args"][1] == {
        "__type__": "date",
        "__value__": "2024-05-02",
    }
    assert str(secret) not in stored.payload_json and secret.hex not in stored.payload_json

    args, kwargs = delivered_call(broker, "q")
    run = Run(
        headers=TrackedHeaders(job_id, job_id, None, "q"),
        task_name=invoice.name,
        job_type=invoice.name,
        queue="q",
        worker="w@host",
        backoff_base_ms=100,
        secrets=lambda: [],
    )
    verdict = tracker._services.runner.run(run, lambda running: invoice.run(*args, **kwargs))
    assert isinstance(verdict, Completed), verdict

    expected = {"at": AT, "day": DAY, "total": Decimal("39.80"), "id": ID, "types": ["datetime"]}
    result = tracker.wait(job_id, timeout=10)
    assert result == expected
    assert [type(result[k]) for k in ("at", "day", "total", "id")] == [
        datetime,
        date,
        Decimal,
        uuid.UUID,
    ]
    job = tracker.get_job(job_id)
    assert job is not None and job.result == expected
    assert json.loads(job.result_json or "")["total"] == {
        "__type__": "decimal",
        "__value__": "39.80",
    }
