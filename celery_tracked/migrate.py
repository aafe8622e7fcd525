"""Public import path of the migrations (``from celery_tracked import migrate``, as the
docs show): its home is ``store/migrate.py``."""

from .store.migrate import (
    VERSION_TABLE,
    alembic_config,
    describe,
    downgrade,
    migrations_dir,
    upgrade,
)

__all__ = ["VERSION_TABLE", "alembic_config", "describe", "downgrade", "migrations_dir", "upgrade"]
