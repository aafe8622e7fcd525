"""The seed's own configuration names, mapped onto celery-tracked's settings.

celery-tracked reads only ``app.conf.tracked_*`` and ``CELERY_TRACKED_*``. The project it
was built for (seed 000) is deployed with its own names; this module maps them, so the
course worker keeps reading them:

=====================================  ============================
seed's environment variable            celery-tracked setting
=====================================  ============================
``REDIS_URL``                          ``tracked_redis_url``
``JOB_QUEUE_DEFAULT_ATTEMPTS``         ``tracked_default_attempts``
``JOB_QUEUE_DEFAULT_BACKOFF_MS``       ``tracked_default_backoff_ms``
``JOB_QUEUE_COURSE_GEN_LIMITER_MS``    ``tracked_rate_limit_ms``
``JOB_QUEUE_COURSE_GEN_CONCURRENCY``   ``tracked_concurrency_limit``
=====================================  ============================

A specific ``CELERY_TRACKED_*`` variable wins over the seed's name (``REDIS_URL`` may well
be a cache), and the app's own ``conf`` wins over both. The values are given as they are:
celery-tracked validates them (a bad one is refused naming the ``tracked_*`` setting).
"""

from __future__ import annotations

from collections.abc import Mapping

#: Each seed name and the celery-tracked setting (without ``tracked_``) it gives.
SEED_NAMES: dict[str, str] = {
    "REDIS_URL": "redis_url",
    "JOB_QUEUE_DEFAULT_ATTEMPTS": "default_attempts",
    "JOB_QUEUE_DEFAULT_BACKOFF_MS": "default_backoff_ms",
    "JOB_QUEUE_COURSE_GEN_LIMITER_MS": "rate_limit_ms",
    "JOB_QUEUE_COURSE_GEN_CONCURRENCY": "concurrency_limit",
}


def seed_settings(environ: Mapping[str, str]) -> dict[str, str]:
    """The ``tracked_*`` settings the seed's names in ``environ`` give: each one set (not
    empty) whose ``CELERY_TRACKED_*`` variable is not."""
    found: dict[str, str] = {}
    for seed_name, name in SEED_NAMES.items():
        specific = environ.get(f"CELERY_TRACKED_{name.upper()}")
        value = environ.get(seed_name)
        if value and not specific:
            found[f"tracked_{name}"] = value
    return found
