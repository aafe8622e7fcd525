"""Django settings: the services come from the environment (``DJPROJ_*``)."""

from __future__ import annotations

import os

from celery_tracked.contrib.django import database_url

SECRET_KEY = "django-insecure-test-only"
DEBUG = False
ALLOWED_HOSTS = ["testserver", "localhost", "127.0.0.1"]
ROOT_URLCONF = "djproj.urls"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",  # the dashboard's recipe: Django's admin users (djproj/asgi.py)
    "django.contrib.sessions",
    "shop",
]
MIDDLEWARE: list[str] = []

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ["DJPROJ_DB_NAME"],
        "USER": os.environ.get("DJPROJ_DB_USER", "postgres"),
        "PASSWORD": os.environ.get("DJPROJ_DB_PASSWORD", ""),
        "HOST": os.environ.get("DJPROJ_DB_HOST", "127.0.0.1"),
        "PORT": os.environ.get("DJPROJ_DB_PORT", "5432"),
    }
}

# Celery, read by app.config_from_object("django.conf:settings", namespace="CELERY")
CELERY_BROKER_URL = os.environ["DJPROJ_REDIS_URL"]
CELERY_TRACKED_DATABASE_URL = database_url(DATABASES["default"])  # the same database
CELERY_TRACKED_REDIS_URL = os.environ["DJPROJ_REDIS_URL"]
CELERY_TASK_DEFAULT_QUEUE = "djproj"
