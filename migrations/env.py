"""Alembic environment for celery-tracked's own tables.

Uses its own version table (``celery_tracked_alembic_version``) and only looks at the
library's tables, so it coexists with the host application's Alembic history.
"""

from __future__ import annotations

from typing import Any

from alembic import context
from sqlalchemy import create_engine

from celery_tracked.store.models import metadata

VERSION_TABLE = "celery_tracked_alembic_version"
config = context.config


def include_object(
    obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
) -> bool:
    if type_ == "table":
        return name in metadata.tables
    table = getattr(obj, "table", None)
    if table is not None:
        return table.name in metadata.tables
    return True


def _configure(**kwargs: Any) -> None:
    context.configure(
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        include_object=include_object,
        compare_type=True,
        render_as_batch=True,
        **kwargs,
    )


def run_offline() -> None:
    _configure(url=config.get_main_option("sqlalchemy.url"), literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection=connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_engine(config.get_main_option("sqlalchemy.url") or "")
    try:
        with engine.connect() as conn:
            _configure(connection=conn)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
