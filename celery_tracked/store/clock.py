"""The database's clock, the one clock lease expiry is judged on.

``db_time(offset)`` is the database server's current time plus ``offset`` seconds (a SQL
expression, usually a bind parameter), compiled for each dialect. Workers never send their
own clock for a lease: a worker whose clock is skewed can neither shorten another run's
lease nor lengthen its own.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement

from ..models import UTCDateTime


class db_time(FunctionElement[Any]):  # lower case: used like a SQL function
    """The database's current time, plus ``offset`` seconds when given."""

    type = UTCDateTime()
    inherit_cache = True
    name = "db_time"

    def __init__(self, offset: ColumnElement[Any] | None = None) -> None:
        super().__init__(*(() if offset is None else (offset,)))


def _offset(element: db_time, compiler: Any, **kw: Any) -> str | None:
    clauses = list(element.clauses)
    return None if not clauses else str(compiler.process(clauses[0], **kw))


@compiles(db_time)
def _default(element: db_time, compiler: Any, **kw: Any) -> str:
    if _offset(element, compiler, **kw) is not None:
        raise NotImplementedError(f"db_time with an offset on {compiler.dialect.name}")
    return "CURRENT_TIMESTAMP"


@compiles(db_time, "postgresql")
def _postgresql(element: db_time, compiler: Any, **kw: Any) -> str:
    offset = _offset(element, compiler, **kw)
    if offset is None:
        return "statement_timestamp()"
    return f"(statement_timestamp() + make_interval(secs => {offset}))"


@compiles(db_time, "sqlite")
def _sqlite(element: db_time, compiler: Any, **kw: Any) -> str:
    # the text SQLAlchemy stores for a DATETIME (microseconds), so comparisons are textual
    offset = _offset(element, compiler, **kw)
    modifier = "" if offset is None else f", ({offset}) || ' seconds'"
    return f"strftime('%Y-%m-%d %H:%M:%f000', 'now'{modifier})"


@compiles(db_time, "mysql")
@compiles(db_time, "mariadb")
def _mysql(element: db_time, compiler: Any, **kw: Any) -> str:
    offset = _offset(element, compiler, **kw)
    if offset is None:
        return "UTC_TIMESTAMP(6)"
    return f"TIMESTAMPADD(MICROSECOND, ROUND(({offset}) * 1000000), UTC_TIMESTAMP(6))"
