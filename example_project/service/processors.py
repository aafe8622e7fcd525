"""The processors: tracked tasks for OCR, AI, indexing, email and notifications.

Each is declared on the service's app by :func:`declare` (the course pipeline's steps are
``example_project.courses.tasks``, shared tasks). Bodies are idempotent for what they did
before a crash, since delivery is at least once:

- OCR, AI and indexing act only on a document owned by their job's owner (the job row's
  ``owner_id``, set by the API from the caller's token): a document of another owner, or a
  job without an owner (a successor not given one, a call from outside the API) ends the
  job at once like a missing one, without reading the document's text;
- they write to a document with one conditional UPDATE that checks its
  current state (not deleted, same revision); a deleted document ends the job at once as
  ``Unrecoverable`` (failed, no further attempts);
- email has a ``Message-ID`` derived from the job id and a row in
  ``example_sent_emails``: ``sending`` is committed before the SMTP conversation,
  ``sent`` after the server accepted the message. A run that finds ``sent`` sends
  nothing (a crash after the send, before the job's completion, delivers once). A run
  that finds ``sending`` sends again with the same ``Message-ID``: the one
  at-least-once window, a crash inside the SMTP conversation or before ``sent`` is
  written (SMTP has no transaction), where a receiver that deduplicates by
  ``Message-ID`` shows one message;
- a notification is one row per job (primary key ``job_id``, ``ON CONFLICT DO NOTHING``).
"""

from __future__ import annotations

import logging
import smtplib
from dataclasses import dataclass
from email.message import EmailMessage
from typing import Any

from celery import Celery

from celery_tracked import Unrecoverable, tracked_task
from example_project.courses import ai

from . import storage
from .config import ServiceConfig

logger = logging.getLogger(__name__)


class DocumentGone(Unrecoverable):
    """The document was deleted, never existed or is not the job's owner's: the job fails,
    no further attempts (the same error for the three: a caller learns nothing of
    another's documents)."""


@dataclass(frozen=True)
class Queues:
    """The Celery queue of each group (see the Procfile: OCR/AI/courses run on a worker of
    low concurrency, indexing/email/notifications on one of higher concurrency)."""

    ocr: str = "ocr_queue"
    ai: str = "ai_queue"
    indexing: str = "indexing_queue"
    email: str = "email_queue"
    notification: str = "notification_queue"
    course: str = "course_generation"


QUEUES = Queues()


def message_id_of(job_id: str) -> str:
    """The email's ``Message-ID``: the same for every run of one job."""
    return f"<{job_id}@service.example>"


def owner_of(task: Any) -> str | None:
    """The running job's owner (its row's ``owner_id``)."""
    job = task.tracker.get_job(task.request.id)
    return None if job is None else job.owner_id


def _document(docs: storage.Documents, document_id: str, owner: str | None) -> dict[str, Any]:
    doc = docs.get(document_id)
    if doc is None or doc["deleted_at"] is not None or owner is None or doc["owner_id"] != owner:
        raise DocumentGone(f"document {document_id} was deleted or is not the job owner's")
    return doc


def _write(docs: storage.Documents, doc: dict[str, Any], **values: Any) -> None:
    if not docs.write(doc["id"], doc["revision"], **values):
        _document(docs, doc["id"], doc["owner_id"])  # raises if it was deleted meanwhile
        raise ConnectionError(f"document {doc['id']} changed meanwhile; retried")


def declare(app: Celery, config: ServiceConfig) -> dict[str, Any]:
    """Declare the processors on ``app``; returns them by their API queue name."""
    docs = storage.Documents(storage.engine_for(config.database_url))

    @tracked_task(
        app=app,
        bind=True,
        shared=False,
        name="service.ocr",
        queue=QUEUES.ocr,
        job_type="ocr",
        max_attempts=3,
    )
    def ocr(self: Any, document_id: str) -> dict[str, Any]:
        # no key template: the API gives each job the caller's key (keys.py)
        doc = _document(docs, document_id, owner_of(self))
        self.set_progress(30, stage="reading")
        text = " ".join(doc["body"].split())
        self.set_progress(80, stage="writing")
        _write(docs, doc, ocr_text=text)
        return {"document_id": document_id, "characters": len(text)}

    @tracked_task(
        app=app,
        bind=True,
        shared=False,
        name="service.ai",
        queue=QUEUES.ai,
        job_type="ai_summary",
        max_attempts=3,
    )
    def summarize(self: Any, document_id: str, instructions: str = "summarize") -> dict[str, Any]:
        doc = _document(docs, document_id, owner_of(self))
        self.set_progress(10, stage="calling the AI provider")
        summary = ai.generate(f"summary:{document_id}", f"{instructions}: {doc['body'][:200]}")
        _write(docs, doc, summary=summary)
        return {"document_id": document_id, "summary": summary}

    @tracked_task(
        app=app,
        bind=True,
        shared=False,
        name="service.index",
        queue=QUEUES.indexing,
        job_type="indexing",
        max_attempts=3,
    )
    def index(self: Any, document_id: str) -> dict[str, Any]:
        doc = _document(docs, document_id, owner_of(self))  # its current state, read now
        self.set_progress(50, stage="indexing")
        _write(docs, doc, indexed_revision=doc["revision"])
        return {"document_id": document_id, "revision": doc["revision"]}

    @tracked_task(
        app=app,
        bind=True,
        shared=False,
        name="service.email",
        queue=QUEUES.email,
        job_type="email",
        max_attempts=5,
    )
    def send_email(self: Any, to: str, subject: str, body: str) -> dict[str, Any]:
        message_id = message_id_of(self.request.id)
        recorded, state = storage.email_state(docs.engine, message_id, self.request.id, to)
        if state == storage.SENT:
            return {"message_id": message_id, "sent": False}
        if not recorded:  # an earlier run died inside the SMTP conversation, or just after
            logger.warning("resending %s: an earlier run may have delivered it", message_id)
        message = EmailMessage()
        message["From"], message["To"], message["Subject"] = config.mail_from, to, subject
        message["Message-ID"] = message_id
        message.set_content(body)
        with smtplib.SMTP(config.smtp_host, config.smtp_port, timeout=30) as smtp:
            smtp.send_message(message)
        storage.mark_sent(docs.engine, message_id)
        return {"message_id": message_id, "sent": True, "resent": not recorded}

    @tracked_task(
        app=app,
        bind=True,
        shared=False,
        name="service.notify",
        queue=QUEUES.notification,
        job_type="notification",
        max_attempts=5,
    )
    def notify(self: Any, user_id: str, message: str) -> dict[str, Any]:
        inserted = storage.insert_ignoring_duplicate(
            docs.engine,
            storage.notifications,
            job_id=self.request.id,
            user_id=user_id,
            message=message,
            created_at=storage.now(),
        )
        return {"inserted": inserted}

    return {
        "ocr": ocr,
        "ai": summarize,
        "indexing": index,
        "email": send_email,
        "notification": notify,
    }
