"""A worker's start refusal names the user's own app (trial of issue 22, F6)."""

from __future__ import annotations

import types

from celery_tracked.adapter.signals import app_name


def test_the_app_is_named_as_the_user_gave_it() -> None:
    app = types.SimpleNamespace(main="tapp")
    assert app_name(app, ["celery", "-A", "proj.celery:app", "worker"]) == "proj.celery:app"
    assert app_name(app, ["celery", "--app=mine", "worker"]) == "mine"
    assert app_name(app, ["celery", "-Aother", "worker"]) == "other"
    assert app_name(app, ["celery", "worker"]) == "tapp"
    assert app_name(types.SimpleNamespace(main="__main__"), ["x"]) == "proj"
    assert app_name(app, ["celery", "-A", "a\x1b[2J"]) == "a\\x1b[2J"
