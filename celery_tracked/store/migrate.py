"""Run the library's Alembic migrations (shipped inside the wheel)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

from ..core.conversions import MEMORY_URL
from ..core.redact import mask_url

VERSION_TABLE = "celery_tracked_alembic_version"


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
