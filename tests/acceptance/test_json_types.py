"""Acceptance: a real worker's body returns Celery's JSON types; ``wait`` gives them back typed."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any


def test_a_result_of_datetime_decimal_and_uuid_comes_back_typed_from_wait(
    env: Any, start_worker: Any
) -> None:
    at = datetime(2024, 5, 1, 12, 30, 15, 250, tzinfo=UTC)
    job_id = (
        env.task("acc.json_types")
        .enqueue(at=at, amount=Decimal("9.95"), id=uuid.UUID(int=7))
        .job_id
    )
    start_worker()

    result = env.tracker.wait(job_id, timeout=30)

    assert result == {
        "at": datetime(2024, 5, 1, 13, 30, 15, 250, tzinfo=UTC),
        "amount": Decimal("19.90"),
        "id": uuid.UUID(int=7),
    }
    assert [type(result[k]) for k in ("at", "amount", "id")] == [datetime, Decimal, uuid.UUID]
    job = env.tracker.get_job(job_id)
    assert json.loads(job.result_json)["at"] == {
        "__type__": "datetime",
        "__value__": "2024-05-01T13:30:15.000250+00:00",
    }
    assert job.payload["kwargs"]["amount"] == Decimal("9.95")
