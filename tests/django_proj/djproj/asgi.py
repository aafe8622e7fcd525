"""The project's ASGI application: Django, and the celery-tracked dashboard under
``/admin/jobs`` for Django's staff users (superusers act, other staff read): the recipe of
docs/dashboard.md, "Django admin users", as a project runs it."""

from __future__ import annotations

import os
from importlib import import_module
from typing import Any

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "djproj.settings")
django_app = get_asgi_application()  # sets Django up before the imports below

from asgiref.sync import sync_to_async  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user  # noqa: E402
from django.http import HttpRequest  # noqa: E402
from starlette.applications import Starlette  # noqa: E402
from starlette.routing import Mount  # noqa: E402

from celery_tracked.web import ADMIN, READ_ONLY, Identity, dashboard  # noqa: E402
from djproj.celery import app as celery_app  # noqa: E402


@sync_to_async
def who(request: Any) -> Identity | None:
    engine = import_module(settings.SESSION_ENGINE)
    django_request = HttpRequest()
    django_request.session = engine.SessionStore(request.cookies.get(settings.SESSION_COOKIE_NAME))
    user = get_user(django_request)
    if not user.is_active or not user.is_staff:
        return None
    return Identity(user.get_username(), ADMIN if user.is_superuser else READ_ONLY)


application = Starlette(
    routes=[
        Mount("/admin/jobs", dashboard(celery_app, auth=who, secret_key=settings.SECRET_KEY)),
        Mount("/", django_app),
    ]
)
