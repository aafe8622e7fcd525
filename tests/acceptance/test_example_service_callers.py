# ruff: noqa: F811, F402  (the fixtures of test_example_service.py, imported by name)
"""The example service keeps callers apart (issue 22, item 4): a job acts only on its
owner's document, every idempotency key is scoped per caller unambiguously, and a body
nested too deep or too large is refused (400, 413) without being read whole.

Through the service's HTTP API (an ASGI client), with real ``celery worker`` processes
of the service on the test's Redis DB and PostgreSQL database.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from service_helpers import AsgiClient, ServiceWorker
from sqlalchemy import text
from test_example_service import (  # noqa: F401 (fixtures)
    ALICE,
    BOB,
    client,
    config,
    nothing_created,
    open_client,
    poll,
    start_worker,
)

from example_project.service.config import ServiceConfig
from example_project.service.limits import MAX_BODY
from example_project.service.processors import QUEUES
from example_project.service.storage import Documents, engine_for

SECRET = "alice's private text: the merger closes on friday"


def stored_result(config: ServiceConfig, job_id: str) -> Any:
    """The job's row as stored: its result and error (the API never shows them)."""
    engine = engine_for(config.database_url)
    try:
        with engine.connect() as conn:
            query = text("SELECT result_json, error_message FROM background_jobs WHERE id = :j")
            return tuple(conn.execute(query, {"j": job_id}).one())
    finally:
        engine.dispose()


def test_a_job_acts_only_on_its_owners_document(
    config: ServiceConfig, client: AsgiClient, start_worker: Callable[..., ServiceWorker]
) -> None:
    docs = Documents(engine_for(config.database_url))
    docs.add("d-alice", "alice", SECRET)
    start_worker(config, f"{QUEUES.ocr},{QUEUES.ai},{QUEUES.indexing}")
    theirs = {}
    for queue in ("ai", "ocr", "indexing"):
        answer = client.post(f"/jobs/{queue}", json={"document_id": "d-alice"}, headers=BOB)
        assert answer.status_code == 202, answer.text
        theirs[queue] = answer.json()["job_id"]
    for queue, job_id in theirs.items():
        job = poll(client, job_id, "failed", "completed", headers=BOB)
        assert job["status"] == "failed" and job["attempts"] == 1, (queue, job)
        assert job["error_type"].endswith("DocumentGone"), job
        assert "merger" not in str(stored_result(config, job_id))
    doc = docs.get("d-alice")
    assert doc["summary"] is None and doc["ocr_text"] is None and doc["indexed_revision"] is None
    # its owner's job on it runs
    mine = client.post("/jobs/ai", json={"document_id": "d-alice"}, headers=ALICE).json()
    assert poll(client, mine["job_id"], "completed", "failed")["status"] == "completed"
    assert "merger" in docs.get("d-alice")["summary"]


def test_without_a_key_each_caller_has_its_own_ocr_job(
    config: ServiceConfig, client: AsgiClient
) -> None:
    first = client.post("/jobs/ocr", json={"document_id": "d-1"}, headers=ALICE)
    again = client.post("/jobs/ocr", json={"document_id": "d-1"}, headers=ALICE)
    bobs = client.post("/jobs/ocr", json={"document_id": "d-1"}, headers=BOB)
    assert first.status_code == 202 and again.status_code == 200, (first.text, again.text)
    assert again.json()["job_id"] == first.json()["job_id"]
    # another caller neither learns the first caller's job nor loses its own submission
    assert bobs.status_code == 202, bobs.text
    assert bobs.json()["created"] is True and bobs.json()["job_id"] != first.json()["job_id"]
    # an Idempotency-Key that spells the OCR job's key is another job still
    keyed = client.post(
        "/jobs/ocr", json={"document_id": "d-1"}, headers={**ALICE, "Idempotency-Key": "d-1"}
    )
    assert keyed.status_code == 202 and keyed.json()["job_id"] != first.json()["job_id"]


def test_user_ids_with_a_colon_never_share_a_key(config: ServiceConfig) -> None:
    tokens = {"tok-1": "acme", "tok-2": "acme:x"}
    colons = ServiceConfig(**{**vars(config), "api_tokens": tokens})
    for client in open_client(colons):
        one = client.post(
            "/jobs/notification",
            json={"message": "m"},
            headers={"Authorization": "Bearer tok-1", "Idempotency-Key": "x:1"},
        )
        two = client.post(
            "/jobs/notification",
            json={"message": "m"},
            headers={"Authorization": "Bearer tok-2", "Idempotency-Key": "1"},
        )
        assert one.status_code == 202 and two.status_code == 202, (one.text, two.text)
        assert one.json()["job_id"] != two.json()["job_id"]
        # a key at the header's limit, for a long user id, still fits the column
        long_user = ServiceConfig(**{**vars(config), "api_tokens": {"tok-3": "u" * 255}})
    for client in open_client(long_user):
        headers = {"Authorization": "Bearer tok-3", "Idempotency-Key": ":" * 200}
        long_one = client.post("/jobs/notification", json={"message": "m"}, headers=headers)
        assert long_one.status_code == 202, long_one.text
        same = client.post("/jobs/notification", json={"message": "m"}, headers=headers)
        assert same.status_code == 200 and same.json()["job_id"] == long_one.json()["job_id"]


def test_a_body_nested_too_deep_is_400(config: ServiceConfig, client: AsgiClient) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    for path in ("/jobs/ocr", "/documents"):
        answer = client.post(
            path, content=deep, headers={**ALICE, "Content-Type": "application/json"}
        )
        assert answer.status_code in (400, 422), (path, answer.status_code, answer.text[:200])
    deep_object = '{"document_id": ' + "[" * 100_000 + "]" * 100_000 + "}"
    answer = client.post(
        "/jobs/ocr", content=deep_object, headers={**ALICE, "Content-Type": "application/json"}
    )
    assert answer.status_code == 400, answer.text[:200]
    nothing_created(config)


def test_a_body_over_the_limit_is_413_and_never_read_whole(
    config: ServiceConfig, client: AsgiClient
) -> None:
    chunk = b"x" * 65_536
    total = 50 * 1024 * 1024 // len(chunk)  # 50 MB
    for path in ("/jobs/ocr", "/documents"):
        sent = 0

        async def body() -> AsyncIterator[bytes]:
            nonlocal sent
            for _ in range(total):
                sent += 1
                yield chunk

        # chunked (no Content-Length): refused once it passed the limit
        answer = client.post(path, content=body(), headers=ALICE)
        assert answer.status_code == 413, answer.text[:200]
        assert sent * len(chunk) <= MAX_BODY + 2 * len(chunk), sent
        # a Content-Length over the limit: refused before any byte is read
        big = client.post(path, content=b"x" * (MAX_BODY + 1), headers=ALICE)
        assert big.status_code == 413, big.text[:200]
    # a body at the limit is read (and judged on its content)
    document = {"document_id": "d-big", "body": "w " * 49_000}
    assert client.post("/documents", json=document, headers=ALICE).status_code == 201
    nothing_created(config)
