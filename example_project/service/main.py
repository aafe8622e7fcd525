"""The ASGI app configured from the environment: ``uvicorn example_project.service.main:api``."""

from __future__ import annotations

from .api import create_api
from .config import ServiceConfig

api = create_api(ServiceConfig.from_env())
