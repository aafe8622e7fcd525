from __future__ import annotations

import pytest

from celery_tracked import PayloadNotSerializable, PayloadTooLarge, Unrecoverable
from celery_tracked.errors import (
    MAX_SUMMARY_CHARS,
    TrackedError,
    mask_exception,
    mask_url,
    summarize,
)
from celery_tracked.outcome import backoff_ms
from celery_tracked.redact import REDACTED, encode_payload, redact, secret_values
from celery_tracked.settings import DEFAULT_REDACT_KEYS

KEYS = DEFAULT_REDACT_KEYS


def test_redact_nested_secret_keys() -> None:
    value = {"user": "a", "db_password": "p1", "nested": [{"API-Key": "k"}], "n": 1}
    assert redact(value, KEYS) == {
        "user": "a",
        "db_password": REDACTED,
        "nested": [{"API-Key": REDACTED}],
        "n": 1,
    }


def test_secret_values_are_collected_for_masking() -> None:
    assert secret_values({"password": "hunter22", "x": {"token": "abc123"}}, KEYS) == [
        "hunter22",
        "abc123",
    ]


def test_payload_checks() -> None:
    assert encode_payload([1], {"a": "b"}, 100) > 0
    with pytest.raises(PayloadNotSerializable):
        encode_payload([object()], {}, 100)
    with pytest.raises(PayloadNotSerializable):
        encode_payload([float("nan")], {}, 100)
    with pytest.raises(PayloadTooLarge):
        encode_payload(["x" * 200], {}, 100)


def test_summary_is_one_line_masked_and_bounded() -> None:
    exc = ValueError(
        "cannot connect to postgresql://app:pw123@db/x password=hunter22\nTraceback: ..."
    )
    text = summarize(exc, secrets=["hunter22"], keys=KEYS)
    assert "pw123" not in text and "hunter22" not in text and "Traceback" not in text
    assert len(summarize(ValueError("x" * 2000))) <= MAX_SUMMARY_CHARS


def test_mask_url() -> None:
    assert mask_url("redis://:s3cret@h:6379/0 and amqp://u:p@h//") == (
        "redis://***@h:6379/0 and amqp://***@h//"
    )


def test_backoff_is_exponential_jittered_and_capped() -> None:
    assert [backoff_ms(n, 1000, 10**9, lambda: 0.0) for n in (1, 2, 3)] == [1000, 2000, 4000]
    assert backoff_ms(2, 1000, 10**9, lambda: 1.0) == 2500
    assert backoff_ms(30, 1000, 60_000, lambda: 0.5) == 60_000


def test_unrecoverable_is_rooted() -> None:
    assert issubclass(Unrecoverable, TrackedError)


def test_mask_url_handles_awkward_passwords() -> None:
    assert mask_url("redis://:pa/ss@h:1/0") == "redis://***@h:1/0"
    assert mask_url("postgresql://u:p@ss@h/db") == "postgresql://***@h/db"
    assert mask_url("redis://h:6379/0") == "redis://h:6379/0"


def test_error_type_never_names_an_internal_class() -> None:
    from celery_tracked.errors import StoreError, error_type
    from celery_tracked.store import Disconnected

    assert error_type(Disconnected("gone")) == "StoreError"
    assert error_type(StoreError("x")) == "StoreError"
    assert error_type(ValueError("x")) == "ValueError"


def test_exception_chain_is_masked_in_place() -> None:
    try:
        try:
            raise ValueError("inner hunter22")
        except ValueError as inner:
            raise RuntimeError("outer hunter22") from inner
    except RuntimeError as exc:
        mask_exception(exc, ["hunter22"], KEYS)
        assert "hunter22" not in str(exc)
        assert exc.__cause__ is not None and "hunter22" not in str(exc.__cause__)


def test_a_chain_that_revisits_an_exception_is_masked_to_the_end() -> None:
    d = ValueError("D has hunter22")
    b = KeyError("B has hunter22")
    b.__cause__, b.__context__ = d, d
    a = TypeError("A has hunter22")
    e = RuntimeError("E has hunter22")
    e.__cause__, e.__context__ = a, b
    mask_exception(e, ["hunter22"], KEYS)
    assert all("hunter22" not in str(x.args) for x in (a, b, d, e))
