"""Message headers, control options, the lease's judgements and the guard key: pure values."""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from celery_tracked import InvalidPayload
from celery_tracked.core.calls import PreparedCall
from celery_tracked.core.jobs import Job, JobStatus
from celery_tracked.core.messages import (
    CONTROL_OPTIONS,
    HEADER_PENDING_FAILURE,
    Control,
    PendingFailure,
    TrackedHeaders,
    check_job_id,
    positive,
)
from celery_tracked.core.outcomes import postpone_for
from celery_tracked.services.lease import HOST_ID, dead_holder, diagnose, owner_id
from celery_tracked.services.producer import ID_GUARD_TTL_MS, NewJob, guard_of
from tests.unit.job_rows import NOW, a_job

# -- TrackedHeaders ------------------------------------------------------------------

FULL = {
    "tracked_job_id": "j-1",
    "tracked_correlation_id": "c-1",
    "tracked_parent_job_id": "p-1",
    "tracked_queue": "emails",
}


def test_read_from_a_dict() -> None:
    assert TrackedHeaders.read(FULL) == TrackedHeaders("j-1", "c-1", "p-1", "emails")


def test_read_only_the_job_id() -> None:
    assert TrackedHeaders.read({"tracked_job_id": "j-1", "other": "x"}) == TrackedHeaders("j-1")


def test_read_from_a_request_whose_custom_headers_are_attributes() -> None:
    request = SimpleNamespace(
        tracked_job_id="j-2", tracked_correlation_id="c-2", tracked_queue="q", id="celery-id"
    )
    assert TrackedHeaders.read(None, request) == TrackedHeaders("j-2", "c-2", None, "q")


def test_dict_values_win_and_missing_ones_come_from_the_request() -> None:
    request = SimpleNamespace(tracked_job_id="from-request", tracked_queue="rq")
    assert TrackedHeaders.read({"tracked_job_id": "from-headers"}, request) == TrackedHeaders(
        "from-headers", queue="rq"
    )


def test_values_are_read_as_text() -> None:
    headers = TrackedHeaders.read({"tracked_job_id": 17, "tracked_correlation_id": 5})
    assert headers == TrackedHeaders("17", "5")


@pytest.mark.parametrize(
    ("headers", "request_"),
    [
        (None, None),
        ({}, None),
        ({"tracked_job_id": ""}, None),
        ({"tracked_job_id": None, "tracked_queue": "q"}, None),
        (None, SimpleNamespace(id="celery-task-id", tracked_queue="q")),
        ({}, object()),
    ],
)
def test_no_job_id_means_not_tracked(headers: Any, request_: Any) -> None:
    assert TrackedHeaders.read(headers, request_) is None


@pytest.mark.parametrize(
    "headers",
    [
        TrackedHeaders("j"),
        TrackedHeaders("j", "c", "p", "q"),
        TrackedHeaders("j", "c", None, "q", PendingFailure(3, "ValueError", "boom: ***")),
        TrackedHeaders("j", pending_retry=PendingFailure(2, "StoreError", "down", False, 250)),
    ],
)
def test_round_trip_through_to_headers(headers: TrackedHeaders) -> None:
    assert TrackedHeaders.read(headers.to_headers()) == headers


def test_to_headers_carries_a_pending_failure_only_when_there_is_one() -> None:
    plain = TrackedHeaders("j", "c")
    assert HEADER_PENDING_FAILURE not in plain.to_headers()
    failure = PendingFailure(2, "KeyError", "missing 'x'")
    carried = plain.with_pending_failure(failure)
    assert plain.pending_failure is None  # a copy
    encoded = carried.to_headers()[HEADER_PENDING_FAILURE]
    assert isinstance(encoded, str)
    assert PendingFailure.decode(encoded) == failure


def test_pending_failure_from_a_request_attribute() -> None:
    failure = PendingFailure(1, "E", "m")
    request = SimpleNamespace(tracked_job_id="j", tracked_pending_failure=failure.encode())
    read = TrackedHeaders.read({}, request)
    assert read is not None and read.pending_failure == failure


# -- Control ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "limit"), [("correlation_id", 64), ("parent_job_id", 36), ("owner_id", 255)]
)
def test_control_text_limits(name: str, limit: int) -> None:
    assert getattr(Control(**{name: "x" * limit}), name) == "x" * limit
    with pytest.raises(InvalidPayload, match=f"{name} must be 1-{limit} characters"):
        Control(**{name: "x" * (limit + 1)})
    with pytest.raises(InvalidPayload):
        Control(**{name: ""})


def test_control_values_are_stored_as_text() -> None:
    control = Control(correlation_id=123, owner_id=7, parent_job_id=9)  # type: ignore[arg-type]
    assert (control.correlation_id, control.owner_id, control.parent_job_id) == ("123", "7", "9")


@pytest.mark.parametrize("value", [0, -1, True, False, "3", 1.5, 2.0])
def test_max_attempts_must_be_a_positive_integer(value: Any) -> None:
    with pytest.raises(InvalidPayload, match="max_attempts must be a positive integer"):
        Control(max_attempts=value)


@pytest.mark.parametrize("value", [None, 1, 10])
def test_max_attempts_accepted(value: int | None) -> None:
    assert Control(max_attempts=value).max_attempts == value


def test_positive() -> None:
    assert positive(None, "n") is None
    assert positive(5, "n") == 5
    with pytest.raises(InvalidPayload, match="n must be a positive integer, got 0"):
        positive(0, "n")


def test_pop_from_takes_only_the_control_options() -> None:
    options = {"countdown": 3, "owner_id": "u1", "max_attempts": 2, "queue": "q"}
    control = Control.pop_from(options)
    assert control == Control(owner_id="u1", max_attempts=2)
    assert options == {"countdown": 3, "queue": "q"}
    assert set(CONTROL_OPTIONS) == {
        "idempotency_key",
        "correlation_id",
        "parent_job_id",
        "owner_id",
        "max_attempts",
        "deadline",
    }


def test_pop_from_validates() -> None:
    with pytest.raises(InvalidPayload):
        Control.pop_from({"max_attempts": 0})


def test_check_job_id() -> None:
    assert check_job_id(None) is None
    assert check_job_id("x" * 36) == "x" * 36
    assert check_job_id(12345) == "12345"
    for bad in ("", "x" * 37):
        with pytest.raises(InvalidPayload, match="1-36 characters"):
            check_job_id(bad)


# -- the lease: dead_holder ---------------------------------------------------------

HOST = "box:4026531836"


def judge(locked_by: str | None, *, running_here: bool = False, alive: bool = True) -> Any:
    asked: list[int] = []

    def is_alive(pid: int) -> bool:
        asked.append(pid)
        return alive

    verdict = dead_holder(
        locked_by, host_id=HOST, pid=100, alive=is_alive, running_here=running_here
    )
    return verdict, asked


@pytest.mark.parametrize("locked_by", [None, ""])
def test_no_holder_is_not_dead(locked_by: str | None) -> None:
    assert judge(locked_by, alive=False) == (None, [])


@pytest.mark.parametrize(
    "locked_by", ["other:4026531836:200", "box:999:200", "xbox:4026531836:200", "200"]
)
def test_holders_of_other_hosts_are_never_judged(locked_by: str) -> None:
    assert judge(locked_by, alive=False) == (None, [])


@pytest.mark.parametrize("pid_text", ["abc", "", "-5", "1.5"])
def test_a_non_numeric_pid_is_never_judged(pid_text: str) -> None:
    assert judge(f"{HOST}:{pid_text}", alive=False) == (None, [])


def test_own_pid_still_running_the_job_is_alive() -> None:
    assert judge(f"{HOST}:100", running_here=True, alive=False) == (None, [])


def test_own_pid_no_longer_running_the_job_is_dead() -> None:
    assert judge(f"{HOST}:100", running_here=False, alive=True) == (f"{HOST}:100", [])


def test_another_live_pid_holds() -> None:
    assert judge(f"{HOST}:200", alive=True) == (None, [200])


def test_a_dead_pid_is_named() -> None:
    assert judge(f"{HOST}:200", alive=False) == (f"{HOST}:200", [200])


def test_owner_id_is_what_dead_holder_reads() -> None:
    assert owner_id() == f"{HOST_ID}:{os.getpid()}"
    assert owner_id(42) == f"{HOST_ID}:42"
    gone = dead_holder(
        owner_id(42), host_id=HOST_ID, pid=os.getpid(), alive=lambda p: p != 42, running_here=True
    )
    assert gone == owner_id(42)


# -- the lease: diagnose ------------------------------------------------------------


def job(**changes: Any) -> Job:
    base: dict[str, Any] = {"status": JobStatus.PROCESSING, "attempts_made": 2, "worker": "w@h"}
    base.update(created_at=NOW - timedelta(minutes=5), started_at=NOW - timedelta(minutes=1))
    base.update(updated_at=NOW - timedelta(minutes=1), locked_by="other:1:200")
    base.update(locked_until=NOW + timedelta(seconds=30))
    return a_job(**{**base, **changes})


def test_a_live_lease_is_held_with_its_remaining_seconds() -> None:
    found = diagnose(job(locked_until=NOW + timedelta(seconds=42.5)), NOW, None)
    assert not found.lapsed
    assert found.remaining_s == pytest.approx(42.5)
    assert found.stale_owner is None
    assert "attempt 2" in found.why


@pytest.mark.parametrize(
    ("until", "why"),
    [
        (NOW - timedelta(seconds=0.001), "its lease expired"),
        (NOW - timedelta(seconds=1), "its lease expired"),
        (None, "its lease was released"),
    ],
)
def test_an_expired_or_released_lease_lapsed(until: datetime | None, why: str) -> None:
    found = diagnose(job(locked_until=until), NOW, None)
    assert (found.lapsed, found.remaining_s, found.stale_owner) == (True, 0.0, None)
    assert found.why == why


def test_an_expired_lease_is_taken_over_only_after_the_grace() -> None:
    expired = job(locked_until=NOW - timedelta(seconds=5))
    held = diagnose(expired, NOW, None, grace_s=15)
    assert not held.lapsed and held.remaining_s == pytest.approx(10)
    assert diagnose(expired, NOW, None, grace_s=4).lapsed


def test_a_dead_holder_lapses_a_lease_that_has_not_expired() -> None:
    found = diagnose(job(locked_until=NOW + timedelta(hours=1)), NOW, "box:1:200")
    assert (found.lapsed, found.remaining_s, found.stale_owner) == (True, 0.0, "box:1:200")
    assert found.why == "its worker process died"


@pytest.mark.parametrize(
    ("remaining", "lease", "expected"),
    [
        (5.0, 60.0, 5.1),
        (0.0, 60.0, 0.2),
        (0.05, 60.0, 0.2),
        (-3.0, 60.0, 0.2),
        (100.0, 60.0, 60.0),
        (59.95, 60.0, 60.0),
    ],
)
def test_postpone_for_bounds(remaining: float, lease: float, expected: float) -> None:
    assert postpone_for(remaining, lease) == pytest.approx(expected)


# -- the guard key ------------------------------------------------------------------


def new_job(key: str | None) -> NewJob:
    call = PreparedCall(key=key, payload_json="{}", argsrepr="()", kwargsrepr="{}", secrets=())
    return NewJob(
        job_id="j-1",
        task_name="app.send",
        job_type="send",
        queue="emails",
        call=call,
        max_attempts=3,
        correlation_id="c-1",
        parent_job_id=None,
        owner_id="u-1",
    )


@pytest.mark.parametrize("ttl_s", [1, 60, 86_400])
def test_guard_with_an_idempotency_key_lasts_the_guard_ttl(ttl_s: int) -> None:
    assert guard_of(new_job("order-7"), ttl_s) == (("guard", "send", "order-7"), ttl_s * 1000)


@pytest.mark.parametrize(
    ("ttl_s", "ttl_ms"), [(1, 1000), (60, 60_000), (61, 60_000), (86_400, 60_000)]
)
def test_guard_without_key_is_per_job_id_and_capped_at_a_minute(ttl_s: int, ttl_ms: int) -> None:
    assert ID_GUARD_TTL_MS == 60_000
    assert guard_of(new_job(None), ttl_s) == (("guard", "id", "j-1"), ttl_ms)


def test_new_job_headers_and_row() -> None:
    created = new_job("order-7")
    assert created.headers() == TrackedHeaders("j-1", "c-1", None, "emails")
    row = created.row()
    assert (row["id"], row["celery_task_id"], row["queue_name"]) == ("j-1", "j-1", "emails")
    assert (row["status"], row["idempotency_key"], row["max_attempts"]) == ("pending", "order-7", 3)
    assert row["created_at"] == row["updated_at"]


def test_the_owner_identity_names_this_boot() -> None:
    """Item 11: hostname and PID namespace inode repeat across cloned hosts; the boot id
    does not."""
    with open("/proc/sys/kernel/random/boot_id") as f:
        boot = f.read().strip()
    assert boot in owner_id()
    clone = owner_id(42).replace(boot, "0" * 36)
    assert (
        dead_holder(
            clone, host_id=HOST_ID, pid=os.getpid(), alive=lambda p: False, running_here=False
        )
        is None
    )


def test_a_pending_retry_has_a_header_of_its_own() -> None:
    """A worker that does not know ``tracked_pending_retry`` never mistakes it for a final
    failure (it takes the job over as before); a pending failure written before
    ``retry_ms`` existed reads as a final failure."""
    retry = PendingFailure(1, "StoreError", "down", False, 250)
    headers = TrackedHeaders("j", pending_retry=retry).to_headers()
    assert HEADER_PENDING_FAILURE not in headers
    assert PendingFailure.decode(headers["tracked_pending_retry"]).retry_ms == 250
    old = '{"attempt": 2, "error_type": "E", "error_message": "m", "retries_exhausted": true}'
    assert PendingFailure.decode(old) == PendingFailure(2, "E", "m", True, None)
