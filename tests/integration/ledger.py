"""A ledger table on the tracking database, for the exactly-once tests: rows ``a``, ``b``
and ``c`` at 0, incremented by the bodies under test."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, create_engine, text


@contextmanager
def ledger_table(database_url: str) -> Iterator[Engine]:
    """An engine on ``database_url`` with the ledger created; disposed on exit."""
    made = create_engine(database_url)
    with made.begin() as conn:
        conn.execute(text("CREATE TABLE ledger (k VARCHAR(50) PRIMARY KEY, n INTEGER)"))
        conn.execute(text("INSERT INTO ledger (k, n) VALUES ('a', 0), ('b', 0), ('c', 0)"))
    yield made
    made.dispose()


def ledger(engine: Engine) -> dict[str, int]:
    """Every row of the ledger, by key."""
    with engine.connect() as conn:
        return {k: n for k, n in conn.execute(text("SELECT k, n FROM ledger"))}
