"""Every test runs on both stores the plugin offers (docs/testing.md, "Choosing the store")."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["memory", "sqlite"])
def tracked_database(request: pytest.FixtureRequest) -> str:
    return str(request.param)
