"""Key lifetimes (issue 7, item 6): the pure decision, the options checked at decoration,
and how ``Tracker.retry`` rebuilds redacted arguments. No service needed."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from celery import Celery

from celery_tracked import InvalidTaskOption, RetryRefused, TrackedTask, tracked_task
from celery_tracked.core.calls import CallShape
from celery_tracked.core.codec import encode
from celery_tracked.core.jobs import Job, JobStatus
from celery_tracked.core.keys import KeyLifetime, KeyRule, Then, key_rule, then
from celery_tracked.core.redact import REDACTED, Redaction
from celery_tracked.services.rerun import retry_arguments
from tests.unit.job_rows import NOW, a_job

KEYS = ("password", "token", "api_key")


def job(status: JobStatus, age_s: float = 10.0, **changes: Any) -> Job:
    base = {"status": status, "attempts_made": 1, "idempotency_key": "k"}
    return a_job(**{**base, "created_at": NOW - timedelta(seconds=age_s), **changes})


ROW = KeyRule()
ENDED = KeyRule(KeyLifetime.ENDED)
THROTTLE = KeyRule(KeyLifetime.THROTTLE, throttle_s=60.0)
DEBOUNCE = KeyRule(KeyLifetime.DEBOUNCE, debounce_s=2.0)
D, N, R = Then.DUPLICATE, Then.NEW_ROUND, Then.REPLACE


@pytest.mark.parametrize(
    ("status", "row", "ended", "debounce"),
    [
        (JobStatus.PENDING, D, D, R),
        (JobStatus.PROCESSING, D, D, D),
        (JobStatus.RETRYING, D, D, D),
        (JobStatus.COMPLETED, D, N, N),
        (JobStatus.FAILED, D, N, N),
        (JobStatus.CANCELLED, D, N, N),
    ],
)
def test_what_an_enqueue_does_with_the_keys_latest_job(
    status: JobStatus, row: Then, ended: Then, debounce: Then
) -> None:
    latest = job(status)
    assert then(ROW, latest, NOW) is row
    assert then(ENDED, latest, NOW) is ended
    assert then(DEBOUNCE, latest, NOW) is debounce


@pytest.mark.parametrize("status", list(JobStatus))
def test_a_throttle_is_time_only(status: JobStatus) -> None:
    assert then(THROTTLE, job(status, age_s=59.9), NOW) is D
    assert then(THROTTLE, job(status, age_s=60.0), NOW) is N


def test_the_guard_answers_for_a_throttled_key_at_most_its_window() -> None:
    assert THROTTLE.guard_ttl_ms(86_400_000) == 60_000
    assert KeyRule(KeyLifetime.THROTTLE, throttle_s=0.0004).guard_ttl_ms(10_000) == 1
    for rule in (ROW, ENDED, DEBOUNCE):
        assert rule.guard_ttl_ms(86_400_000) == 86_400_000
    assert not ROW.reused and ENDED.reused and THROTTLE.reused and DEBOUNCE.reused


BAD = [
    ({"key_lifetime": "forever"}, "key_lifetime", "must be one of 'row', 'ended'"),
    ({"key_lifetime": "throttle"}, "throttle_s", "is required"),
    ({"key_lifetime": "throttle", "throttle_s": 0}, "throttle_s", "> 0"),
    ({"key_lifetime": "throttle", "throttle_s": "60"}, "throttle_s", "number of seconds"),
    ({"key_lifetime": "throttle", "throttle_s": float("inf")}, "throttle_s", "number"),
    ({"key_lifetime": "throttle", "throttle_s": True}, "throttle_s", "number"),
    ({"throttle_s": 5}, "throttle_s", "only applies to key_lifetime='throttle'"),
    ({"key_lifetime": "ended", "debounce_s": 1}, "debounce_s", "only applies"),
    ({"key_lifetime": "debounce", "debounce_s": -1}, "debounce_s", ">= 0"),
    ({"key_lifetime": "throttle", "throttle_s": 1e12}, "throttle_s", "at most 2147483647"),
    ({"key_lifetime": "debounce", "debounce_s": 1e12}, "debounce_s", "at most"),
]


@pytest.mark.parametrize(("options", "name", "text"), BAD)
def test_bad_key_options_are_refused_at_decoration(
    options: dict[str, Any], name: str, text: str
) -> None:
    with pytest.raises(InvalidTaskOption, match=text) as info:
        key_rule(options)
    assert info.value.setting == name
    app = Celery("keys", broker="memory://", set_as_current=False)
    with pytest.raises(InvalidTaskOption, match=text):
        tracked_task(app=app, idempotency_key="k:{x}", **options)(lambda x: x)
    with pytest.raises(InvalidTaskOption, match=text):
        type("Bad", (TrackedTask,), options)


# finalizing an app also registers every shared task other test modules declared (some
# share a name on purpose): Celery's warning about those is not what this test is about
@pytest.mark.filterwarnings("ignore::celery.exceptions.DuplicateTaskNameWarning")
def test_key_options_are_read_through_a_base_class() -> None:
    class Throttled(TrackedTask):  # type: ignore[type-arg]
        key_lifetime = "throttle"
        throttle_s = 60

    class Windowed(Throttled):
        throttle_s = 30

    assert Windowed._tracked_keys == KeyRule(KeyLifetime.THROTTLE, 30.0, None)
    app = Celery("keys", broker="memory://", set_as_current=False)

    @tracked_task(app=app, base=Throttled, throttle_s=5, shared=False)
    def work(x: str) -> str:
        return x

    app.finalize()
    assert work._tracked_keys == KeyRule(KeyLifetime.THROTTLE, 5.0, None)


def test_the_default_rule_is_seed_000s() -> None:
    assert key_rule({}) == ROW
    assert key_rule({"key_lifetime": KeyLifetime.DEBOUNCE}) == KeyRule(KeyLifetime.DEBOUNCE)


# -- Tracker.retry's arguments ----------------------------------------------------------


def send(x: str, api_key: str, options: dict[str, Any] | None = None) -> None: ...


SHAPE = CallShape(send)


def stored(args: list[Any], kwargs: dict[str, Any]) -> Job:
    safe_args, safe_kwargs = SHAPE.redacted(args, kwargs, Redaction(KEYS))
    payload = encode({"args": safe_args, "kwargs": safe_kwargs})
    return job(JobStatus.FAILED, payload_json=payload)


def test_arguments_without_secrets_come_back_as_stored() -> None:
    failed = job(JobStatus.FAILED, payload_json=encode({"args": ["a"], "kwargs": {"n": 1}}))
    assert retry_arguments(failed, SHAPE, {}, Redaction(KEYS)) == (["a"], {"n": 1})
    assert retry_arguments(failed, None, {}, Redaction(KEYS)) == (["a"], {"n": 1})


def test_redacted_arguments_must_be_given_again() -> None:
    failed = stored(["a", "sk-1"], {"options": {"token": "t-1", "depth": 2}})
    assert failed.payload == {
        "args": ["a", REDACTED],
        "kwargs": {"options": {"token": REDACTED, "depth": 2}},
    }
    with pytest.raises(RetryRefused, match="api_key, options"):
        retry_arguments(failed, SHAPE, {}, Redaction(KEYS))
    with pytest.raises(RetryRefused, match="options"):
        retry_arguments(failed, SHAPE, {"api_key": "sk-1"}, Redaction(KEYS))
    given = {"api_key": "sk-2", "options": {"token": "t-2", "depth": 2}}
    assert retry_arguments(failed, SHAPE, given, Redaction(KEYS)) == (
        ["a", "sk-2"],
        {"options": {"token": "t-2", "depth": 2}},
    )


def test_only_the_redacted_arguments_may_be_given() -> None:
    failed = stored(["a", "sk-1"], {})
    with pytest.raises(RetryRefused, match=r"may be given again \(api_key\), not x"):
        retry_arguments(failed, SHAPE, {"api_key": "sk-1", "x": "b"}, Redaction(KEYS))
    plain = job(JobStatus.FAILED, payload_json=encode({"args": [], "kwargs": {"x": "a"}}))
    with pytest.raises(RetryRefused, match=r"\(none\), not x"):
        retry_arguments(plain, SHAPE, {"x": "b"}, Redaction(KEYS))


def test_a_given_value_must_match_the_stored_one_beyond_its_secrets() -> None:
    failed = stored(["a", "sk-1"], {"options": {"token": "t-1", "depth": 2}})
    given = {"api_key": "sk-1", "options": {"token": "t-1", "depth": 3}}
    with pytest.raises(RetryRefused, match="differ from its stored arguments"):
        retry_arguments(failed, SHAPE, given, Redaction(KEYS))


def test_redacted_arguments_of_a_task_not_registered_here_are_refused() -> None:
    failed = stored(["a", "sk-1"], {})
    with pytest.raises(RetryRefused, match=r"register task app\.t here"):
        retry_arguments(failed, None, {"api_key": "sk-1"}, Redaction(KEYS))


def test_a_url_whose_credentials_were_masked_must_be_given_again() -> None:
    failed = stored(["a", "sk-1"], {"options": {"dsn": "postgresql://u:pw@db/x"}})
    assert failed.payload["kwargs"]["options"] == {"dsn": "postgresql://***@db/x"}
    with pytest.raises(RetryRefused, match="api_key, options"):
        retry_arguments(failed, SHAPE, {}, Redaction(KEYS))
    given = {"api_key": "sk-1", "options": {"dsn": "postgresql://u:pw@db/x"}}
    assert retry_arguments(failed, SHAPE, given, Redaction(KEYS))[1] == {
        "options": given["options"]
    }
