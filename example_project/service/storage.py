"""The example's own tables: its documents, the emails it sent, its notifications.

They live in the tracking database (``DATABASE_URL``) but belong to the example, not to
celery-tracked: :func:`create_tables` creates them when asked
(``python -m example_project.service init-db``), never at import.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    Column,
    DateTime,
    Engine,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    insert,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.pool import NullPool

metadata = MetaData()

documents = Table(
    "example_documents",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("owner_id", String(255), nullable=False),
    Column("body", Text, nullable=False),
    Column("revision", Integer, nullable=False, default=1),
    Column("ocr_text", Text),
    Column("summary", Text),
    Column("indexed_revision", Integer),
    Column("deleted_at", DateTime(timezone=True)),
)

#: One row per email (its Message-ID is derived from the job id), committed before the
#: SMTP conversation in state ``sending`` and set to ``sent`` once the server accepted it.
sent_emails = Table(
    "example_sent_emails",
    metadata,
    Column("message_id", String(255), primary_key=True),
    Column("job_id", String(36), nullable=False),
    Column("recipient", String(255), nullable=False),
    Column("state", String(16), nullable=False),
    Column("sent_at", DateTime(timezone=True)),
)

SENDING, SENT = "sending", "sent"

#: A notification per job, at most: ``job_id`` is the primary key.
notifications = Table(
    "example_notifications",
    metadata,
    Column("job_id", String(36), primary_key=True),
    Column("user_id", String(255), nullable=False),
    Column("message", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)


def engine_for(url: str) -> Engine:
    """An engine without a pool: safe in a forked worker child, and closed on dispose."""
    return create_engine(url, poolclass=NullPool)


def create_tables(url: str) -> None:
    """Create the example's tables (those missing) in the database at ``url``."""
    engine = engine_for(url)
    try:
        metadata.create_all(engine)
    finally:
        engine.dispose()


def now() -> datetime:
    return datetime.now(timezone.utc)


class Documents:
    """The example's document store (what OCR, AI and indexing read and write)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def add(self, document_id: str, owner_id: str, body: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(insert(documents).values(id=document_id, owner_id=owner_id, body=body))

    def get(self, document_id: str) -> dict[str, Any] | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(documents).where(documents.c.id == document_id)).first()
        return None if row is None else dict(row._mapping)

    def delete(self, document_id: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                update(documents).where(documents.c.id == document_id).values(deleted_at=now())
            )

    def write(self, document_id: str, revision: int, **values: Any) -> bool:
        """Write ``values`` only if the document still exists, undeleted, at ``revision``:
        one conditional UPDATE, so a deletion or an edit in between is never overwritten."""
        statement = (
            update(documents)
            .where(
                documents.c.id == document_id,
                documents.c.deleted_at.is_(None),
                documents.c.revision == revision,
            )
            .values(**values)
        )
        with self.engine.begin() as conn:
            return conn.execute(statement).rowcount == 1


def insert_ignoring_duplicate(engine: Engine, table: Table, **values: Any) -> bool:
    """``INSERT ... ON CONFLICT DO NOTHING``: True if this call inserted the row."""
    dialect = engine.dialect.name
    if dialect == "postgresql":
        statement: Any = pg_insert(table).values(**values).on_conflict_do_nothing()
    elif dialect == "sqlite":
        statement = sqlite_insert(table).values(**values).on_conflict_do_nothing()
    else:  # MySQL/MariaDB: INSERT IGNORE
        statement = insert(table).values(**values).prefix_with("IGNORE")
    # an INSERT's rowcount is kept only when asked for (SQLAlchemy 2.1 and psycopg give -1)
    statement = statement.execution_options(preserve_rowcount=True)
    with engine.begin() as conn:
        return conn.execute(statement).rowcount == 1


def email_state(engine: Engine, message_id: str, job_id: str, recipient: str) -> tuple[bool, str]:
    """Record the intent to send ``message_id`` (state ``sending``, committed) unless its
    row exists; returns whether this call recorded it, and the row's state: ``sending``
    (just recorded, or an earlier run died inside the SMTP conversation or before marking
    it) or ``sent``."""
    values = {"message_id": message_id, "job_id": job_id, "recipient": recipient}
    recorded = insert_ignoring_duplicate(engine, sent_emails, state=SENDING, **values)
    with engine.connect() as conn:
        state = conn.execute(
            select(sent_emails.c.state).where(sent_emails.c.message_id == message_id)
        ).scalar_one()
    return recorded, str(state)


def mark_sent(engine: Engine, message_id: str) -> None:
    """``sending`` → ``sent``, once the SMTP server accepted the message."""
    with engine.begin() as conn:
        conn.execute(
            update(sent_emails)
            .where(sent_emails.c.message_id == message_id)
            .values(state=SENT, sent_at=now())
        )
