"""Celery's ``celery_parameters`` fixture with ``task_cls=TrackedTask``: every test app of
Celery's suite (``celery_session_app``, ``celery_app``) builds its tasks on
``TrackedTask``. Registered by ``ct_conformance_plugin.py`` in the tracked run only."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from celery_tracked import TrackedTask


@pytest.fixture(scope="session")
def celery_parameters() -> Mapping[str, Any]:
    return {"task_cls": TrackedTask}
