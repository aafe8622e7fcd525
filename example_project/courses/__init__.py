"""Course generation (seed 000, FEAT-84): a self-chaining pipeline of tracked tasks.

``outline → module_lessons (per module) → module_exam (per module) → … → final_exam →
mastery_analysis``: each step declares its successor with ``self.then`` (created with the
step's completion), calls a fake AI provider, and stops the course with ``Unrecoverable``
when the credits run out. See docs/pipelines.md.
"""

from .celery import app as celery_app

__all__ = ["celery_app"]
