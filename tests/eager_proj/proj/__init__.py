"""A Celery project in the usual layout, used by the eager-mode acceptance tests.

``tests/acceptance/test_eager_proj.py`` imports it as a user's test suite would, and runs
this folder's own ``tests/`` with ``python -m pytest`` as the user would.
"""

from .celery import app as celery_app

__all__ = ("celery_app",)
