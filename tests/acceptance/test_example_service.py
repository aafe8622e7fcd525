"""The example service (example_project/service/) over HTTP, as its callers use it.

An ASGI client (``httpx.ASGITransport``) talks to the app in this process; the jobs run
in real ``celery worker`` processes of the service, on the test's own Redis DB and
PostgreSQL database; emails go to a real SMTP server on loopback (aiosmtpd).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import redis
from pg_holds import Hold, check_dead_clients
from service_helpers import (
    AsgiClient,
    Mailbox,
    ServiceWorker,
    SmtpServer,
    asgi_client,
    black_hole,
    free_port,
)
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from example_project.service.api import create_api
from example_project.service.config import ServiceConfig
from example_project.service.errors import UNAVAILABLE
from example_project.service.processors import QUEUES, message_id_of
from example_project.service.storage import Documents, create_tables, engine_for
from tests.conftest import wait_for

ALICE = {"Authorization": "Bearer tok-alice"}
BOB = {"Authorization": "Bearer tok-bob"}
ADMIN = {"Authorization": "Bearer tok-admin"}
ALL_QUEUES = ",".join(vars(QUEUES).values())


def make_config(redis_url: str, database_url: str, **overrides: Any) -> ServiceConfig:
    values: dict[str, Any] = {
        "broker_url": redis_url,
        "database_url": database_url,
        "redis_url": redis_url,
        "api_tokens": {"tok-alice": "alice", "tok-bob": "bob"},
        "admin_token": "tok-admin",
        "rate_limit_per_minute": 100,
        **overrides,
    }
    return ServiceConfig(**values)


@pytest.fixture
def config(redis_url: str, pg_database_url: str) -> ServiceConfig:
    create_tables(pg_database_url)
    return make_config(redis_url, pg_database_url)


def open_client(config: ServiceConfig) -> Iterator[AsgiClient]:
    api = create_api(config)
    try:
        with asgi_client(api) as client:
            yield client
    finally:
        api.state.service.close()


@pytest.fixture
def client(config: ServiceConfig) -> Iterator[AsgiClient]:
    yield from open_client(config)


@pytest.fixture
def start_worker(tmp_path: Path) -> Iterator[Callable[..., ServiceWorker]]:
    started: list[ServiceWorker] = []

    def start(config: ServiceConfig, queues: str = ALL_QUEUES) -> ServiceWorker:
        worker = ServiceWorker(config, queues, tmp_path / f"worker-{len(started)}.log")
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()
        print(f"===== worker log =====\n{worker.log()[-10000:]}")


def poll(client: AsgiClient, job_id: str, *statuses: str, headers: Any = ALICE) -> Any:
    def seen() -> Any:
        body = client.get(f"/jobs/{job_id}", headers=headers).json()
        return body if body["status"] in statuses else None

    return wait_for(seen, timeout=30, what=f"job {job_id} to be {statuses}")


def nothing_created(config: ServiceConfig) -> None:
    engine = create_engine(config.database_url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM background_jobs")).scalar() == 0
    finally:
        engine.dispose()
    client = redis.Redis.from_url(config.redis_url)
    try:
        assert all(client.llen(queue) == 0 for queue in vars(QUEUES).values())
    finally:
        client.close()


def test_a_job_is_accepted_polled_to_completed_and_only_its_owner_sees_it(
    config: ServiceConfig, client: AsgiClient, start_worker: Callable[..., ServiceWorker]
) -> None:
    Documents(engine_for(config.database_url)).add("d-1", "alice", "  scanned   page one ")
    start_worker(config)
    answer = client.post("/jobs/ocr", json={"document_id": "d-1"}, headers=ALICE)
    assert answer.status_code == 202, answer.text
    job_id = answer.json()["job_id"]
    assert answer.json() == {"job_id": job_id, "status": "pending", "created": True}

    job = poll(client, job_id, "completed")
    assert job["attempts"] == 1 and job["progress"] == 100 and job["stage"] == "writing"
    assert job["finished_at"] is not None and "payload" not in str(job)
    assert Documents(engine_for(config.database_url)).get("d-1")["ocr_text"] == "scanned page one"
    # another caller, or no job at all: the same 404
    assert client.get(f"/jobs/{job_id}", headers=BOB).status_code == 404
    assert client.get(f"/jobs/{job_id[:-4]}beef", headers=ALICE).status_code == 404
    assert client.get(f"/jobs/{job_id}").status_code == 401


def test_a_caller_creates_a_document_then_ocrs_it(
    config: ServiceConfig, client: AsgiClient, start_worker: Callable[..., ServiceWorker]
) -> None:
    start_worker(config, QUEUES.ocr)
    doc = {"document_id": "d-new", "body": "  page   one "}
    created = client.post("/documents", json=doc, headers=ALICE)
    assert created.status_code == 201, created.text
    assert created.json() == {"document_id": "d-new"}
    assert client.post("/documents", json=doc, headers=BOB).status_code == 409
    assert client.post("/documents", json={"document_id": "x"}, headers=ALICE).status_code == 422
    assert client.post("/documents", json=doc).status_code == 401
    stored = Documents(engine_for(config.database_url)).get("d-new")
    assert stored is not None and stored["owner_id"] == "alice"
    job_id = client.post("/jobs/ocr", json={"document_id": "d-new"}, headers=ALICE).json()["job_id"]
    poll(client, job_id, "completed")
    stored = Documents(engine_for(config.database_url)).get("d-new")
    assert stored is not None and stored["ocr_text"] == "page one"


def test_the_same_idempotency_key_is_the_same_job(
    config: ServiceConfig, client: AsgiClient, start_worker: Callable[..., ServiceWorker]
) -> None:
    start_worker(config)
    key = {"Idempotency-Key": "order-{2024}"}
    first = client.post("/jobs/notification", json={"message": "hi"}, headers={**ALICE, **key})
    again = client.post("/jobs/notification", json={"message": "hi"}, headers={**ALICE, **key})
    assert first.status_code == 202 and again.status_code == 200, (first.text, again.text)
    assert again.json()["job_id"] == first.json()["job_id"] and again.json()["created"] is False
    # another caller's key of the same text is its own job
    bobs = client.post("/jobs/notification", json={"message": "hi"}, headers={**BOB, **key})
    assert bobs.status_code == 202 and bobs.json()["job_id"] != first.json()["job_id"]
    for answer in (first, bobs):
        poll(client, answer.json()["job_id"], "completed", headers=answer.request.headers)
    rows = Documents(engine_for(config.database_url)).engine.connect()
    with rows:
        stored = rows.execute(text("SELECT user_id FROM example_notifications")).scalars()
        assert sorted(stored) == ["alice", "bob"]


@pytest.mark.parametrize(
    ("queue", "body"),
    [
        ("nosuchqueue", {"document_id": "d-1"}),
        ("ocr", {"document": "d-1"}),
        ("ocr", {"document_id": ""}),
        ("email", {"to": "not-an-address", "subject": "s", "body": "b"}),
        ("course", {"course_id": "c1", "modules": "many"}),
        ("ocr", ["d-1"]),
    ],
)
def test_an_unknown_queue_or_an_invalid_body_is_400_and_creates_nothing(
    config: ServiceConfig, client: AsgiClient, queue: str, body: Any
) -> None:
    answer = client.post(f"/jobs/{queue}", json=body, headers=ALICE)
    assert answer.status_code == 400, answer.text
    nothing_created(config)


@pytest.mark.parametrize("down", ["broker_url", "redis_url"])
def test_a_broker_or_redis_that_is_down_is_503_without_details(
    config: ServiceConfig, down: str, caplog: pytest.LogCaptureFixture
) -> None:
    closed = free_port()
    broken = ServiceConfig(**{**vars(config), down: f"redis://127.0.0.1:{closed}/0"})
    for client in open_client(broken):
        answer = client.post("/jobs/ocr", json={"document_id": "d-1"}, headers=ALICE)
        assert answer.status_code == 503
        assert answer.json() == {"detail": UNAVAILABLE}
        assert str(closed) not in answer.text and "127.0.0.1" not in answer.text
    if down == "redis_url":
        lines = [r for r in caplog.records if r.name == "example_project.service.api"]
        assert len(lines) == 1 and str(closed) not in lines[0].getMessage(), lines
    nothing_created(config)


BLACK_HOLES = {
    "broker_url": "redis://127.0.0.1:{port}/0",
    "redis_url": "redis://127.0.0.1:{port}/0",
    "database_url": "postgresql+psycopg://postgres@127.0.0.1:{port}/x",
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("down", sorted(BLACK_HOLES))
def test_a_broker_redis_or_database_that_never_answers_is_503_within_seconds(
    config: ServiceConfig, down: str
) -> None:
    """Each accepts the connection and never answers: the API answers 503, not hangs."""
    with black_hole() as port:
        broken = ServiceConfig(**{**vars(config), down: BLACK_HOLES[down].format(port=port)})
        for client in open_client(broken):
            started = time.monotonic()
            answer = client.post("/jobs/notification", json={"message": "m"}, headers=ALICE)
            took = time.monotonic() - started
            assert answer.status_code == 503, answer.text
            assert answer.json() == {"detail": UNAVAILABLE}
            assert took < 12, took
    nothing_created(config)


def test_a_caller_over_its_limit_gets_429(config: ServiceConfig) -> None:
    limited = ServiceConfig(**{**vars(config), "rate_limit_per_minute": 2})
    # the limit's window is the wall clock's minute: never straddle two
    wait_for(lambda: time.time() % 60 < 55, timeout=10, what="a fresh minute")
    for client in open_client(limited):
        codes = [
            client.post("/jobs/notification", json={"message": str(n)}, headers=ALICE).status_code
            for n in range(3)
        ]
        assert codes == [202, 202, 429]
        over = client.post("/jobs/notification", json={"message": "3"}, headers=ALICE)
        assert over.status_code == 429 and 1 <= int(over.headers["Retry-After"]) <= 60
        assert (
            client.post("/jobs/notification", json={"message": "x"}, headers=BOB).status_code == 202
        )


def test_a_crash_inside_the_smtp_conversation_resends_the_same_message_id(
    config: ServiceConfig, start_worker: Callable[..., ServiceWorker]
) -> None:
    """The worker's pool process is SIGKILLed while the SMTP server holds its answer to
    DATA (the message is received, ``sent`` is not written): the next run finds
    ``sending`` and sends again with the same ``Message-ID``. The server receives the
    message twice (SMTP has no transaction); a mailbox that deduplicates by
    ``Message-ID`` shows one."""
    mailbox = Mailbox(hold_first=True)
    with SmtpServer(mailbox) as smtp:
        cfg = ServiceConfig(**{**vars(config), "smtp_port": smtp.port})
        worker = start_worker(cfg, QUEUES.email)
        for client in open_client(cfg):
            mail = {"to": "bob@example.com", "subject": "Report", "body": "ready"}
            job_id = client.post("/jobs/email", json=mail, headers=ALICE).json()["job_id"]
            wait_for(lambda: mailbox.received, timeout=20, what="the first delivery")
            assert email_state(cfg, job_id, "sending")
            (child,) = worker.children()
            os.kill(child, signal.SIGKILL)
            mailbox.release()
            job = poll(client, job_id, "completed", "failed")
    assert job["status"] == "completed" and job["attempts"] == 2, job
    assert mailbox.received == [message_id_of(job_id)] * 2  # received twice
    assert list(mailbox.delivered) == [message_id_of(job_id)]  # one after deduplication
    assert email_state(cfg, job_id, "sent")
    resent = {"message_id": message_id_of(job_id), "sent": True, "resent": True}
    assert job_result(cfg, job_id) == resent


def job_result(config: ServiceConfig, job_id: str) -> Any:
    """The job's result, as the worker stored it (the API never shows it)."""
    engine = engine_for(config.database_url)
    try:
        with engine.connect() as conn:
            query = text("SELECT result_json FROM background_jobs WHERE id = :j")
            return json.loads(conn.execute(query, {"j": job_id}).scalar_one())
    finally:
        engine.dispose()


def email_state(config: ServiceConfig, job_id: str, state: str) -> bool:
    """The job's email row is in ``state``."""
    engine = engine_for(config.database_url)
    try:
        with engine.connect() as conn:
            query = text("SELECT state FROM example_sent_emails WHERE message_id = :m")
            return conn.execute(query, {"m": message_id_of(job_id)}).scalar() == state
    finally:
        engine.dispose()


def kill_while_completion_waits(worker: ServiceWorker, hold: Hold) -> None:
    """The run's completion UPDATE waits on ``hold``'s row lock: SIGKILL the pool process,
    wait until its waiting backends noticed, then release the lock (the redelivered run's
    claim is not held up by the test)."""
    blocked = wait_for(hold.waiting, timeout=20, what="the completion to wait on the lock")
    (child,) = worker.children()
    os.kill(child, signal.SIGKILL)
    wait_for(lambda: hold.gone(blocked), timeout=20, what="the killed run's backends to end")
    hold.release()


def test_an_email_whose_job_runs_again_after_it_was_sent_reaches_the_server_once(
    config: ServiceConfig, start_worker: Callable[..., ServiceWorker]
) -> None:
    """The first run sends and writes ``sent``; its completion waits on the test's row
    lock on the job, and its pool process is SIGKILLed there. The job is redelivered and
    runs again: it finds ``sent`` and sends nothing. The server received one DATA."""
    check_dead_clients(config.database_url)
    mailbox = Mailbox(hold_first=True)
    with SmtpServer(mailbox) as smtp, Hold(config.database_url) as hold:
        cfg = ServiceConfig(**{**vars(config), "smtp_port": smtp.port})
        worker = start_worker(cfg, QUEUES.email)
        for client in open_client(cfg):
            mail = {"to": "bob@example.com", "subject": "Report", "body": "ready"}
            job_id = client.post("/jobs/email", json=mail, headers=ALICE).json()["job_id"]
            # the run is inside the SMTP conversation (the server holds its answer)
            wait_for(lambda: mailbox.received, timeout=20, what="the first delivery")
            hold.lock_job(job_id)
            mailbox.release()
            wait_for(partial(email_state, cfg, job_id, "sent"), timeout=20, what="sent")
            kill_while_completion_waits(worker, hold)
            job = poll(client, job_id, "completed", "failed")
    assert job["status"] == "completed" and job["attempts"] == 2, job
    assert mailbox.received == [message_id_of(job_id)]  # one DATA at the server
    assert job_result(cfg, job_id) == {"message_id": message_id_of(job_id), "sent": False}


def test_a_notification_whose_job_runs_again_after_its_insert_is_stored_once(
    config: ServiceConfig, client: AsgiClient, start_worker: Callable[..., ServiceWorker]
) -> None:
    """The first run inserts its row (the test's uncommitted row of the same key holds
    the insert until the test takes a row lock on the job); its completion waits on that
    lock and its pool process is SIGKILLed there. The job runs again: one row."""
    check_dead_clients(config.database_url)
    job_id = client.post("/jobs/notification", json={"message": "hi"}, headers=ALICE).json()[
        "job_id"
    ]
    count = "SELECT count(*) FROM example_notifications WHERE job_id = :j"
    with Hold(config.database_url) as key_hold, Hold(config.database_url) as row_hold:
        key_hold.execute(
            "INSERT INTO example_notifications VALUES (:j, 'test', 'test', now())", j=job_id
        )
        worker = start_worker(config, QUEUES.notification)
        wait_for(key_hold.waiting, timeout=20, what="the body's insert to wait on the key")
        row_hold.lock_job(job_id)  # the job is processing: its claim committed
        key_hold.release()
        wait_for(lambda: row_hold.scalar(count, j=job_id) == 1, timeout=20, what="the insert")
        kill_while_completion_waits(worker, row_hold)
        job = poll(client, job_id, "completed", "failed")
        rows = key_hold.scalar(count, j=job_id)
        owner = key_hold.scalar("SELECT user_id FROM example_notifications")
    assert job["status"] == "completed" and job["attempts"] == 2, job
    assert rows == 1 and owner == "alice"
    assert job_result(config, job_id) == {"inserted": False}  # the second run's


def test_a_deleted_document_fails_its_job_with_no_further_attempt(
    config: ServiceConfig, client: AsgiClient, start_worker: Callable[..., ServiceWorker]
) -> None:
    docs = Documents(engine_for(config.database_url))
    docs.add("d-9", "alice", "text")
    docs.delete("d-9")
    start_worker(config, QUEUES.indexing)
    job_id = client.post("/jobs/indexing", json={"document_id": "d-9"}, headers=ALICE).json()[
        "job_id"
    ]
    job = poll(client, job_id, "failed", "completed")
    assert job["status"] == "failed" and job["attempts"] == 1, job
    assert job["error_type"] is not None and docs.get("d-9")["indexed_revision"] is None


def test_the_admin_lists_cancels_and_retries_through_the_tracker(
    config: ServiceConfig, client: AsgiClient
) -> None:
    job_id = client.post("/jobs/notification", json={"message": "m"}, headers=ALICE).json()[
        "job_id"
    ]
    assert client.get("/admin/jobs", headers=ALICE).status_code == 401
    listed = client.get("/admin/jobs", params={"owner_id": "alice"}, headers=ADMIN).json()
    assert [j["job_id"] for j in listed["jobs"]] == [job_id]
    assert client.post(f"/admin/jobs/{job_id}/cancel", headers=ADMIN).json() == {"cancelled": True}
    assert client.get(f"/jobs/{job_id}", headers=ALICE).json()["status"] == "cancelled"
    assert client.post(f"/admin/jobs/{job_id}/retry", headers=ADMIN).json() == {"retried": True}
    assert client.get(f"/jobs/{job_id}", headers=ALICE).json()["status"] == "pending"
    refused = client.post(f"/admin/jobs/{job_id}/retry", headers=ADMIN)  # pending: refused
    assert refused.status_code == 409, refused.text
    view = client.get(f"/admin/pipelines/{job_id}", headers=ADMIN).json()
    assert view["state"] and [j["job_id"] for j in view["jobs"]] == [job_id]


def test_a_course_runs_as_a_pipeline_the_admin_can_view(
    config: ServiceConfig, client: AsgiClient, start_worker: Callable[..., ServiceWorker]
) -> None:
    start_worker(config, QUEUES.course)
    answer = client.post("/jobs/course", json={"course_id": "c1", "modules": 1}, headers=ALICE)
    assert answer.status_code == 202, answer.text
    first = answer.json()["job_id"]

    def ended() -> Any:
        view = client.get(f"/admin/pipelines/{first}", headers=ADMIN).json()
        return view if view["state"] != "running" else None

    view = wait_for(ended, timeout=30, what="the course to end")
    assert view["state"] == "completed", view
    steps = [job["type"] for job in view["jobs"]]
    assert steps == [
        "courses.outline",
        "courses.module_lessons",
        "courses.module_exam",
        "courses.final_exam",
        "courses.mastery_analysis",
    ]
    polled = client.get(f"/jobs/{first}", headers=ALICE).json()
    assert polled["status"] == "completed"
    # the caller (the owner of the first step) sees the whole course through it
    assert polled["pipeline"]["state"] == "completed"
    assert [step["type"] for step in polled["pipeline"]["steps"]] == steps
    assert {step["status"] for step in polled["pipeline"]["steps"]} == {"completed"}
    later = polled["pipeline"]["steps"][1]["job_id"]
    answer = client.get(f"/jobs/{later}", headers=ALICE)
    assert answer.status_code == 200  # a later step carries its first step's owner
    assert client.get(f"/jobs/{later}", headers=BOB).status_code == 404
    assert client.get(f"/jobs/{first}", headers=BOB).status_code == 404
