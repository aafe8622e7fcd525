"""The demo's Celery app, configured from the environment (:mod:`.config`): what
``celery -A example_project.demo.app worker`` loads in services mode."""

from __future__ import annotations

import os

from .config import create_app

app = create_app(os.environ)
