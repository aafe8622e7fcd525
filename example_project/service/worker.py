"""The app of the workers, beat and flower, configured from the environment:
``celery -A example_project.service.worker worker -Q ocr_queue,ai_queue``."""

from __future__ import annotations

from .celery_app import create_celery
from .config import ServiceConfig

app = create_celery(ServiceConfig.from_env())
