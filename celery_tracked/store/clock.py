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

from .models import UTCDateTime


class db_time(FunctionElement[Any]):  # lower case: used like a SQL function
    """The database's current time, plus ``offset`` seconds when given."""

    type = UTCDateTime()
    inherit_cache = True
    name = "db_time"

    def __init__(self, offset: ColumnElement[Any] | None = None) -> None:
        super().__init__(*(() if offset is None else (offset,)))


#: per dialect: the current time, and the current time plus ``{offset}`` seconds
_SQLITE = "strftime('%Y-%m-%d %H:%M:%f000', 'now'{modifier})"  # SQLAlchemy's DATETIME text
_MYSQL = ("UTC_TIMESTAMP(6)", "TIMESTAMPADD(MICROSECOND, ROUND(({offset}) * 1000000), {now})")
_DIALECTS: dict[str, tuple[str, str]] = {
    "postgresql": ("statement_timestamp()", "({now} + make_interval(secs => {offset}))"),
    "sqlite": (_SQLITE.format(modifier=""), _SQLITE.format(modifier=", ({offset}) || ' seconds'")),
    "mysql": _MYSQL,
    "mariadb": _MYSQL,
}


@compiles(db_time)
def _compile(element: db_time, compiler: Any, **kw: Any) -> str:
    name = compiler.dialect.name
    if name not in _DIALECTS:
        raise NotImplementedError(f"db_time on {name}")
    now, plus = _DIALECTS[name]
    clauses = list(element.clauses)
    if not clauses:
        return now
    return plus.format(now=now, offset=compiler.process(clauses[0], **kw))
