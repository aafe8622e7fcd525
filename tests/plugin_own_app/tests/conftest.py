"""docs/testing.md, "Your own app": Celery's ``celery_app`` fixture overridden."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def celery_app() -> Any:
    from myshop.celery import app

    app.conf.update(broker_url="memory://", result_backend="cache+memory://")
    return app
