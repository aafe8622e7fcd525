"""``python -m example_project.service init-db``: create the tracking tables (celery-tracked's
migrations) and the example's own tables in ``DATABASE_URL``."""

from __future__ import annotations

import sys

from celery_tracked.migrate import upgrade

from .config import ServiceConfig
from .storage import create_tables


def main(argv: list[str]) -> int:
    if argv != ["init-db"]:
        print("usage: python -m example_project.service init-db", file=sys.stderr)
        return 2
    config = ServiceConfig.from_env()
    upgrade(config.database_url)
    create_tables(config.database_url)
    print("tables ready")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
