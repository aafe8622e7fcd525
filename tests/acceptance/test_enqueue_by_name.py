"""Acceptance: a tracked job enqueued by its task's name (issue 24, build 5).

``Tracker.enqueue(name, ...)`` and ``celery tracked call NAME --kwargs ...`` create the
same row a decorated call creates (every column but ids and times), publish the same
message (arguments redacted alike) and take the same idempotency guard; a name that is
not a tracked task here is a typed error, nothing created; ``app.send_task`` of a tracked
task is logged once with the fix.
"""

from __future__ import annotations

import json
import logging
import subprocess
from collections.abc import Callable
from typing import Any

import pytest
from conftest import CELERY, HERE, worker_environ
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool
from tracked_app import QUEUE

from celery_tracked import InvalidPayload, UnknownTask

NAME = "acc.byname.ocr"
KWARGS = {"document_id": "d-1", "pages": 3, "api_token": "s3cr3t-token"}
#: what differs between two jobs of the same call: their ids (a job's correlation id is
#: its own id unless given) and times
DIFFERENT = ("id", "celery_task_id", "correlation_id")


def row(env: Any) -> dict[str, Any]:
    """The one job's row, but its ids and times; then the job, its events, its guard
    and its message are removed, so the next producer starts from the same state."""
    (found,) = env.sql("SELECT * FROM background_jobs")
    values = {
        k: v
        for k, v in found._mapping.items()
        if k not in DIFFERENT and not k.endswith(("_at", "_until"))
    }
    (message,) = env.broker_messages()
    values["message"] = {
        k: message["headers"][k] for k in ("task", "argsrepr", "kwargsrepr", "retries")
    }
    values["message_queue"] = message["properties"]["delivery_info"]["routing_key"]
    engine = create_engine(env.database_url, poolclass=NullPool)
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM background_job_events"))
        conn.execute(text("DELETE FROM background_jobs"))
    engine.dispose()
    guards = env.redis.keys("celery_tracked*")
    assert guards, "no guard key taken"
    env.redis.delete(*guards, QUEUE)
    return values


ARGS = ["d-1", 3, "s3cr3t-token"]


def test_by_name_and_the_cli_create_the_row_a_decorated_call_creates(
    env: Any, cli_in_process: Callable[..., Any]
) -> None:
    for args, kwargs in (([], KWARGS), (ARGS, {})):
        decorated = env.task(NAME).enqueue(*args, **kwargs)
        expected = row(env)
        assert expected["payload_json"] and "s3cr3t" not in json.dumps(expected, default=str)

        by_name = env.tracker.enqueue(NAME, *args, **kwargs)
        assert by_name.created and by_name.job_id != decorated.job_id
        assert row(env) == expected

        given = ("--args", json.dumps(args)) if args else ("--kwargs", json.dumps(kwargs))
        out = cli_in_process("call", NAME, *given, "--json")
        assert out.returncode == 0, out.stdout + out.stderr
        called = json.loads(out.stdout)
        assert (called["status"], called["created"]) == ("pending", True)
        assert row(env) == expected


def test_by_name_takes_the_guard_of_a_decorated_call(
    env: Any, cli_in_process: Callable[..., Any]
) -> None:
    first = env.task(NAME).enqueue(**KWARGS)
    again = env.tracker.enqueue(NAME, **KWARGS)
    assert (again.job_id, again.created) == (first.job_id, False)
    out = cli_in_process("call", NAME, "--kwargs", json.dumps(KWARGS))
    assert out.returncode == 0
    assert out.stdout.strip() == (
        f"job {first.job_id} pending (deduplicated: an existing job holds its key)"
    )
    keyed = env.tracker.enqueue(NAME, "d-2", _idempotency_key="mine")
    assert env.tracker.get_job(keyed.job_id).idempotency_key == "mine"
    assert env.sql("SELECT count(*) FROM background_jobs")[0][0] == 2


def test_a_name_that_is_no_tracked_task_here_is_refused_and_creates_nothing(
    env: Any, cli_in_process: Callable[..., Any]
) -> None:
    with pytest.raises(UnknownTask, match="no task of this name is registered in this process"):
        env.tracker.enqueue("acc.nowhere", x=1)
    with pytest.raises(UnknownTask, match="a plain Celery task, not a tracked one") as info:
        env.tracker.enqueue("acc.byname.plain", x=1)
    assert info.value.task_name == "acc.byname.plain" and isinstance(info.value, LookupError)
    with pytest.raises(InvalidPayload):
        env.tracker.enqueue(NAME, pages=2)  # document_id missing
    missing = cli_in_process("call", "acc.nowhere", "--kwargs", "{}")
    assert missing.returncode == 1 and "no task of this name" in missing.stderr
    bad = cli_in_process("call", NAME, "--kwargs", '[{"password": "hunter2"}]')
    assert bad.returncode == 2 and "must be a JSON object, got a JSON list" in bad.stderr
    assert "hunter2" not in bad.stderr + bad.stdout
    refused = cli_in_process("call", NAME, "--kwargs", '{"pages": 2}')
    assert refused.returncode == 2, refused.stderr
    assert env.sql("SELECT count(*) FROM background_jobs")[0][0] == 0
    assert env.broker_messages() == []


def test_the_cli_refuses_empty_control_values_control_keywords_and_refused_options(
    env: Any, cli_in_process: Callable[..., Any]
) -> None:
    """Exit 2, the API's own message, nothing created: an empty ``--idempotency-key`` or
    ``--correlation-id``; a control keyword inside ``--kwargs`` (its value never echoed);
    options Celery refuses (a soft time limit over the hard one)."""
    with pytest.raises(InvalidPayload, match="idempotency_key") as api:
        env.tracker.enqueue(NAME, document_id="d-1", _idempotency_key="")
    empty = cli_in_process(
        "call", NAME, "--kwargs", '{"document_id": "d-1"}', "--idempotency-key", ""
    )
    assert empty.returncode == 2, empty.stdout + empty.stderr
    assert str(api.value).splitlines()[0] in empty.stderr
    no_id = cli_in_process(
        "call", NAME, "--kwargs", '{"document_id": "d-1"}', "--correlation-id", ""
    )
    assert no_id.returncode == 2 and "correlation_id" in no_id.stderr, no_id.stderr
    for control, instead in (
        ("_idempotency_key", "--idempotency-key"),
        ("_correlation_id", "--correlation-id"),
        ("_options", None),
        ("_max_attempts", None),
    ):
        given = json.dumps({"document_id": "d-1", control: "hunter2"})
        out = cli_in_process("call", NAME, "--kwargs", given)
        assert out.returncode == 2, (control, out.stdout, out.stderr)
        assert control in out.stderr and "hunter2" not in out.stdout + out.stderr
        assert instead is None or instead in out.stderr
    refused = cli_in_process("call", "acc.byname.limits", "--kwargs", '{"x": 1}')
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "soft_time_limit" in refused.stderr
    assert env.sql("SELECT count(*) FROM background_jobs")[0][0] == 0
    assert env.broker_messages() == []


def test_send_task_of_a_tracked_task_is_logged_once_with_the_fix(
    env: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="celery_tracked")
    env.task(NAME).enqueue(document_id="d-11")  # tracked: never reported
    env.app.send_task(NAME, kwargs={"document_id": "d-9"}, queue=QUEUE)
    env.app.send_task(NAME, kwargs={"document_id": "d-10"}, queue=QUEUE)
    env.app.send_task("acc.byname.plain", kwargs={"x": 1}, queue=QUEUE)
    told = [r.getMessage() for r in caplog.records if "sent untracked" in r.getMessage()]
    assert len(told) == 1, told
    assert f"Tracker.for_app(app).enqueue('{NAME}', ...)" in told[0]
    assert f"tracked call {NAME}" in told[0]
    assert env.sql("SELECT count(*) FROM background_jobs")[0][0] == 1


def test_the_celery_executable_runs_tracked_call(env: Any, run_cli: Callable[..., Any]) -> None:
    """The real ``celery -A tracked_app tracked call`` (the entry point, its own process)."""
    out = run_cli("call", NAME, "--kwargs", json.dumps(KWARGS))
    assert out.returncode == 0, out.stdout + out.stderr
    job_id = out.stdout.split()[1]
    assert out.stdout.strip() == f"job {job_id} pending (created)"
    job = env.tracker.get_job(job_id)
    assert (job.task_name, job.idempotency_key) == (NAME, "ocr:d-1")


def test_celery_call_of_a_tracked_task_is_logged_by_the_producer(env: Any) -> None:
    """Celery's own ``celery -A tracked_app call NAME`` (``send_task`` from a process whose
    app is never finalized): the producer itself says the message is untracked, with the
    fix, once; a plain task's call says nothing."""
    for name, told in ((NAME, True), ("acc.byname.plain", False)):
        out = subprocess.run(
            [CELERY, "-A", "tracked_app", "call", name, "--kwargs", '{"document_id": "d-12"}'],
            cwd=str(HERE),
            env=worker_environ(env.config, None, None),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        warned = [line for line in out.stderr.splitlines() if "sent untracked" in line]
        assert len(warned) == (1 if told else 0), out.stderr
        if told:
            assert f"tracked call {NAME}" in warned[0], warned
    assert env.sql("SELECT count(*) FROM background_jobs")[0][0] == 0
