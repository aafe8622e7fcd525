"""The service's Celery app, built by :func:`create_celery` from a :class:`ServiceConfig`.

The workers, beat and flower use :mod:`.worker` (built from the environment); the tests
build their own.
"""

from __future__ import annotations

from typing import Any

from celery import Celery

from .config import ServiceConfig
from .processors import QUEUES, declare

#: seconds the broker has to accept a connection, or to answer one command
BROKER_TIMEOUT = 2


def create_celery(config: ServiceConfig) -> Celery:
    """A Celery app on ``config``'s broker, with the processors and the course steps."""
    app = Celery("service", broker=config.broker_url, set_as_current=False)
    app.conf.update(config.celery_settings())
    app.conf.update(
        task_default_queue=QUEUES.course,  # the course steps name no queue
        worker_prefetch_multiplier=1,
        broker_connection_retry_on_startup=True,
        # an API call must not hang on a broker that is down or never answers (a black
        # hole: the connection accepted, no reply): bounded connect, reads and retries,
        # then 503
        broker_connection_timeout=BROKER_TIMEOUT,
        broker_connection_max_retries=1,
        broker_transport_options={
            "socket_timeout": BROKER_TIMEOUT,
            "socket_connect_timeout": BROKER_TIMEOUT,
        },
        task_publish_retry_policy={
            "max_retries": 1,
            "interval_start": 0.2,
            "interval_step": 0.2,
            "interval_max": 0.5,
        },
    )
    declare(app, config)
    import example_project.courses.tasks  # noqa: F401 (shared tasks: they bind to this app)

    return app


def processors(app: Celery) -> dict[str, Any]:
    """The app's tasks by the API's queue name."""
    names = {
        "ocr": "service.ocr",
        "ai": "service.ai",
        "indexing": "service.index",
        "email": "service.email",
        "notification": "service.notify",
        "course": "courses.outline",
    }
    return {queue: app.tasks[name] for queue, name in names.items()}
