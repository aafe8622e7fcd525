"""Run the library's Alembic migrations (shipped inside the wheel)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import NullPool

from ..core.conversions import MEMORY_URL
from ..core.errors import StoreError
from ..core.redact import first_line, mask_url

VERSION_TABLE = "celery_tracked_alembic_version"
#: How long the schema check at a worker's start may wait to connect (PostgreSQL).
CHECK_CONNECT_S = 10


def migrations_dir() -> Path:
    """The Alembic environment: inside the installed package, or the source checkout's."""
    here = Path(__file__).resolve().parents[1]  # the package (this is store/migrate.py)
    for candidate in (here / "_migrations", here.parent / "migrations"):
        if (candidate / "env.py").is_file():
            return candidate
    raise FileNotFoundError("celery-tracked migrations not found (broken installation?)")


def alembic_config(database_url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    # '%' is interpolation syntax in alembic's ini parser
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    """Upgrade the tracking tables to ``revision`` (default: the newest). Nothing for
    ``memory://``: the in-memory store has no tables."""
    if database_url == MEMORY_URL:
        return
    command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str) -> None:
    """Downgrade the tracking tables to ``revision`` (``base`` drops them). Nothing for
    ``memory://``."""
    if database_url == MEMORY_URL:
        return
    command.downgrade(alembic_config(database_url), revision)


def describe(database_url: str) -> str:
    return mask_url(database_url)


def schema_problem(database_url: str, app_name: str = "proj") -> str | None:
    """What is wrong with the tracking tables of ``database_url``, or None when they are
    at this version's head revision (or the store is ``memory://``). A revision this
    version does not know (a newer celery-tracked migrated the database) is no problem:
    that version's migrations keep what this one reads.

    Raises:
        StoreError: the database could not be read (unreachable...): nothing is known.

    ``app_name``: what the command it says to run passes to ``-A``.
    """
    if database_url == MEMORY_URL:
        return None
    script = ScriptDirectory.from_config(alembic_config(database_url))
    heads = set(script.get_heads())
    run = f"run `celery -A {app_name} tracked migrate` against {mask_url(database_url)}"
    if _absent_sqlite_file(database_url):  # never create an empty file just to look
        return f"the celery-tracked tables are missing: {run}"
    postgres = make_url(database_url).get_backend_name() == "postgresql"
    # bounded: a worker's start waits for this (PyMySQL's own default is 10 s)
    connect_args = {"connect_timeout": CHECK_CONNECT_S} if postgres else {}
    engine = create_engine(database_url, poolclass=NullPool, connect_args=connect_args)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
            current = set(context.get_current_heads())
    except SQLAlchemyError as exc:
        reason = first_line(str(getattr(exc, "orig", None) or exc), type(exc).__name__)
        raise StoreError(f"reading the schema revision failed: {mask_url(reason)}") from None
    finally:
        engine.dispose()
    if current == heads:
        return None
    if not current:
        return f"the celery-tracked tables are missing: {run}"
    known = {rev.revision for rev in script.walk_revisions()}
    if not current <= known:
        return None  # migrated by a newer version
    return (
        f"the celery-tracked tables are at revision {', '.join(sorted(current))}, this "
        f"version needs {', '.join(sorted(heads))}: {run}"
    )


def sqlite_file(database_url: str) -> Path | None:
    """The file of a SQLite URL, made absolute (None: not SQLite, or in memory)."""
    try:
        url = make_url(database_url)
    except (SQLAlchemyError, ValueError):
        return None
    if not url.drivername.startswith("sqlite") or url.database in (None, "", ":memory:"):
        return None
    return Path(str(url.database)).resolve()


def _absent_sqlite_file(database_url: str) -> bool:
    path = sqlite_file(database_url)
    return path is not None and not path.exists()
