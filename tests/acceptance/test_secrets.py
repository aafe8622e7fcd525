"""Acceptance: a secret passed as ``password`` leaks nowhere.

Not into ``payload_json``, the worker's output, the messages' ``argsrepr``/``kwargsrepr``,
Celery task events (``task-sent``/``task-received``/``task-retried``/``task-failed``, also
for the retried messages), the job's ``error_message`` or its history.
"""

from __future__ import annotations

import json
import threading
import uuid
from typing import Any

from celery_tracked import JobStatus
from tests.conftest import wait_for


class EventCapture:
    """Collects every Celery event of the test's broker in a background thread."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._receiver: Any = None
        self._thread = threading.Thread(target=self._run, name="event-capture", daemon=True)
        self.error: BaseException | None = None

    def _on_event(self, event: dict[str, Any]) -> None:
        with self._lock:
            self.events.append(event)

    def _run(self) -> None:
        try:
            with self.app.connection_for_read() as conn:
                self._receiver = self.app.events.Receiver(conn, handlers={"*": self._on_event})
                self._receiver.capture(limit=None, timeout=None, wakeup=False)
        except BaseException as exc:  # reported by the test
            self.error = exc

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.events)

    def of(self, kind: str, job_id: str) -> list[dict[str, Any]]:
        return [e for e in self.snapshot() if e.get("type") == kind and e.get("uuid") == job_id]

    def start(self) -> None:
        self._thread.start()
        probe = f"probe-{uuid.uuid4().hex}"
        with self.app.events.default_dispatcher() as dispatcher:

            def probed() -> bool:
                dispatcher.send("task-probe", uuid=probe)
                return any(e.get("uuid") == probe for e in self.snapshot())

            wait_for(probed, timeout=15, interval=0.2, what="the event receiver to listen")

    def stop(self) -> None:
        if self._receiver is not None:
            self._receiver.should_stop = True
        self._thread.join(timeout=10)
        assert not self._thread.is_alive(), "the event receiver did not stop"


def test_canary_secret_never_leaks(env: Any, start_worker: Any) -> None:
    canary = f"canary-{uuid.uuid4().hex}"
    task = env.task("acc.secret")
    capture = EventCapture(env.app)
    capture.start()
    try:
        # fails once (the exception message holds the password), then succeeds
        once = task.enqueue(user="alice", password=canary, fail_times=1).job_id
        # always fails
        never = task.enqueue(user="bob", password=canary, fail_times=99, _max_attempts=2).job_id
        # the password passed positionally
        positional = task.apply_async(args=("carol", canary), kwargs={"fail_times": 1}).id

        # the published messages (no worker yet): the password is only in the body
        messages = env.broker_messages()
        assert sorted(m["headers"]["id"] for m in messages) == sorted([once, never, positional])
        for message in messages:
            headers = message["headers"]
            assert canary not in json.dumps(headers)
            assert "[redacted]" in headers["kwargsrepr"] + headers["argsrepr"]

        worker = start_worker(events=True)
        job_once = env.wait_status(once, "completed", "failed", timeout=30)
        job_never = env.wait_status(never, "completed", "failed", timeout=30)
        job_positional = env.wait_status(positional, "completed", "failed", timeout=30)
        wait_for(
            lambda: (
                capture.of("task-succeeded", once)
                and capture.of("task-failed", never)
                and capture.of("task-succeeded", positional)
            ),
            timeout=20,
            what="the final task events",
        )
    finally:
        capture.stop()
    assert capture.error is None, capture.error

    # the jobs behaved as intended
    assert job_once.status is JobStatus.COMPLETED
    assert job_once.attempts_made == 2
    assert job_never.status is JobStatus.FAILED
    assert job_never.attempts_made == 2
    assert job_positional.status is JobStatus.COMPLETED
    assert job_positional.attempts_made == 2
    assert env.ran(once) == 2 and env.ran(never) == 2 and env.ran(positional) == 2

    # payload_json
    for job in (job_once, job_never, job_positional):
        assert canary not in (job.payload_json or "")
    for job in (job_once, job_never):
        assert job.payload["kwargs"]["password"] == "[redacted]"
        assert job.payload["kwargs"]["user"] in ("alice", "bob")
    assert job_positional.payload["args"] == ["carol", "[redacted]"]

    # error_message and history
    assert job_never.error_type == "RuntimeError"
    assert job_never.error_message is not None
    assert canary not in job_never.error_message
    assert job_never.error_message.startswith("login failed for bob with password ")
    for job_id in (once, never, positional):
        for event in env.tracker.history(job_id):
            assert canary not in (event.message or ""), event
    retried = [e for e in env.tracker.history(once) if e.event == "retrying"]
    assert len(retried) == 1 and "login failed for alice" in (retried[0].message or "")
    retried = [e for e in env.tracker.history(positional) if e.event == "retrying"]
    assert len(retried) == 1 and "login failed for carol" in (retried[0].message or "")

    # Celery events, the retried messages included
    events = capture.snapshot()
    for job_id in (once, never, positional):
        received = capture.of("task-received", job_id)
        assert len(received) == 2, received  # the first delivery and the retry
        for event in received:
            assert "[redacted]" in event["kwargs"] + event["args"], event
    assert capture.of("task-retried", once)
    leaked = [e for e in events if canary in json.dumps(e, default=str)]
    assert leaked == []

    # the worker's whole output, and its structured log records
    log = worker.log()
    assert "login failed for bob" in log  # the failure was logged...
    assert canary not in log  # ...without the password
    assert canary not in worker.jsonl_path.read_text()
