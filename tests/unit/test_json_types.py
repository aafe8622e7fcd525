"""Celery's JSON types (kombu's): stored in kombu's tagged form, given back with their type."""

from __future__ import annotations

import json
import uuid
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from kombu.utils.json import dumps as kombu_dumps

from celery_tracked import PayloadNotSerializable, PayloadTooLarge
from celery_tracked.core.calls import CallRules, CallShape, prepare_call
from celery_tracked.core.jobs import Job, JobStatus
from celery_tracked.core.redact import REDACTED, Redaction, encode_payload, secret_values
from tests.unit.job_rows import a_job

KEYS = ("password", "token", "api_key")
AT = datetime(2024, 5, 1, 12, 30, 15, 250, tzinfo=timezone(timedelta(hours=2)))
ID = uuid.UUID("12345678-1234-5678-1234-567812345678")

VALUES: list[Any] = [
    AT,
    datetime(2024, 5, 1, 12, 30),  # naive stays naive
    date(2024, 5, 1),
    time(8, 15, 30),
    Decimal("12.30"),
    ID,
    b"raw bytes",
    b"\xff\x00",
    {"nested": [AT, {"amount": Decimal("-0.01")}], "plain": [1, "x", None, True, 2.5]},
]


def call(func: Any, *args: Any, max_bytes: int = 65_536, **kwargs: Any) -> Any:
    rules = CallRules(task_name="t", redaction=Redaction(KEYS), max_payload_bytes=max_bytes)
    return prepare_call(CallShape(func), rules, args, kwargs)


def job(payload_json: str | None = None, result_json: str | None = None) -> Job:
    return a_job(
        status=JobStatus.COMPLETED,
        payload_json=payload_json,
        result_json=result_json,
    )


def send(value: Any, other: Any = None) -> None: ...


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_an_argument_comes_back_from_the_payload_with_its_type(value: Any) -> None:
    prepared = call(send, value, other=value)
    payload = job(payload_json=prepared.payload_json).payload
    assert payload == {"args": [value], "kwargs": {"other": value}}
    assert type(payload["args"][0]) is type(value)


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_a_result_comes_back_with_its_type(value: Any) -> None:
    stored = kombu_dumps(value)  # what the runner writes: kombu's form
    result = job(result_json=stored).result
    assert result == value and type(result) is type(value)


def test_the_stored_form_is_kombus_tagged_form() -> None:
    prepared = call(send, date(2024, 5, 1), other={"amount": Decimal("1.50"), "id": ID})
    assert json.loads(prepared.payload_json) == {
        "args": [{"__type__": "date", "__value__": "2024-05-01"}],
        "kwargs": {
            "other": {
                "amount": {"__type__": "decimal", "__value__": "1.50"},
                "id": {"__type__": "uuid", "__value__": {"hex": ID.hex}},
            }
        },
    }
    assert job(payload_json='{"at":{"__type__":"datetime","__value__":"2024-05-01T12:00:00"}}')


def test_redaction_walks_structures_holding_these_types() -> None:
    def login(user: Any, password: Any, extra: Any) -> None: ...

    secret_id = uuid.uuid4()
    extra = {"token": secret_id, "when": AT, "items": [{"api_key": Decimal("123.45")}]}
    prepared = call(login, {"at": AT}, Decimal("98765"), extra)
    payload = job(payload_json=prepared.payload_json).payload
    safe_extra = {"token": REDACTED, "when": AT, "items": [{"api_key": REDACTED}]}
    assert payload == {"args": [{"at": AT}, REDACTED, safe_extra], "kwargs": {}}
    stored = prepared.payload_json
    assert str(secret_id) not in stored and secret_id.hex not in stored
    assert {"98765", str(secret_id), secret_id.hex, "123.45"} <= set(prepared.secrets)


def test_secret_values_of_these_types_are_collected_for_masking() -> None:
    found = secret_values({"password": Decimal("4242"), "token": ID, "x": AT}, KEYS)
    assert found == ["4242", str(ID), ID.hex]


def test_the_size_limit_applies_to_the_tagged_form() -> None:
    value = [Decimal("1")] * 4
    encoded = kombu_dumps({"args": [value], "kwargs": {}}, separators=(",", ":"))
    assert encode_payload([value], {}, len(encoded)) == len(encoded)
    with pytest.raises(PayloadTooLarge):
        encode_payload([value], {}, len(encoded) - 1)


def test_a_tagged_value_that_would_not_read_back_is_refused() -> None:
    # kombu could not decode it (unknown type): refused at enqueue, not at the first read;
    # values it cannot encode at all (object(), set, NaN) stay refused (test_calls.py)
    with pytest.raises(PayloadNotSerializable):
        call(send, {"__type__": "no-such-type", "__value__": 1})
