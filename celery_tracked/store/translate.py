"""Driver errors translated at the edge: every driver or SQLAlchemy error leaves the
store as a :class:`~celery_tracked.errors.StoreError` (masked, one line)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar, cast

from sqlalchemy.exc import (
    ArgumentError,
    CompileError,
    DataError,
    DBAPIError,
    IntegrityError,
    SQLAlchemyError,
)

from ..core.errors import Disconnected, DuplicateJob, Refused, StoreError, TrackedError
from ..core.redact import first_line
from .models import events, jobs

__all__ = ["Disconnected", "DuplicateJob", "Refused", "explained", "reconnecting", "translated"]

#: Said when a statement failed because a tracking table does not exist.
MIGRATE_HINT = "the celery-tracked tables are missing: run `celery -A proj tracked migrate`"
#: PostgreSQL's undefined_table, MariaDB/MySQL's ER_NO_SUCH_TABLE
_UNDEFINED_TABLE = ("42P01", 1146)


F = TypeVar("F", bound=Callable[..., Any])


def reconnecting(method: F) -> F:
    """Run ``method`` once more on a fresh connection when the first one was dead.

    Not used for the completion: the ``OutcomeWriter`` re-sends it itself, bounded, with backoff.
    """

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except Disconnected:
            return method(*args, **kwargs)

    return cast(F, wrapper)


@contextmanager
def translated(action: str, inserting: bool = False) -> Iterator[None]:
    """Turn driver and SQLAlchemy errors into ``StoreError`` (``Disconnected`` for a dead
    pooled connection). A constraint violation is ``DuplicateJob`` when ``inserting`` a
    job, else ``Refused``."""
    try:
        yield
    except DuplicateJob:
        if inserting:
            raise
        raise Refused(f"{action} failed: a constraint refused a row") from None
    except StoreError:
        raise
    except IntegrityError as exc:
        if inserting:
            raise DuplicateJob() from None
        raise Refused(f"{action} failed: {_reason(exc)}") from None
    except (DataError, CompileError, ArgumentError) as exc:  # a value or column it cannot hold
        raise Refused(f"{action} failed: {_reason(exc)}") from None
    except SQLAlchemyError as exc:
        kind = StoreError
        if isinstance(exc, DBAPIError) and exc.connection_invalidated:
            kind = Disconnected
        raise kind(f"{action} failed: {_reason(exc)}") from None
    except (UnicodeError, ValueError) as exc:  # a driver refused a value before sending it
        if isinstance(exc, TrackedError):
            raise
        # never its text: a driver's UnicodeEncodeError holds the whole statement, values
        # and all (secrets too)
        raise Refused(
            f"{action} failed: a value could not be sent ({type(exc).__name__})"
        ) from None


def _reason(exc: SQLAlchemyError) -> str:
    orig = getattr(exc, "orig", None)
    cause = exc if orig is None else orig
    return explained(cause, first_line(str(cause), type(exc).__name__))


def explained(exc: BaseException, reason: str) -> str:
    """``reason``, followed by :data:`MIGRATE_HINT` when ``exc`` (a driver's error) says a
    tracking table does not exist (PostgreSQL 42P01, SQLite "no such table", MariaDB 1146)."""
    text = str(exc)
    if not any(table.name in text for table in (jobs, events)):
        return reason
    code = getattr(exc, "sqlstate", None) or getattr(exc, "pgcode", None)
    number = exc.args[0] if exc.args else None
    if code in _UNDEFINED_TABLE or number in _UNDEFINED_TABLE or "no such table" in text:
        return f"{reason} ({MIGRATE_HINT})"
    return reason
