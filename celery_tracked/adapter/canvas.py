"""Celery canvases (``group``, ``chain``, ``chord``, links, ``self.replace``), told apart
from a plain call by the options Celery passes. Pure: no I/O.

Celery freezes a canvas member's task id before sending it and then waits on that id. A
member deduplicated onto an existing job would publish nothing under it, so the canvas
would wait forever: such a duplicate is refused (``DuplicateInCanvas``) instead.

``self.replace(sig)`` freezes the replacement with the replacer's own task id; the
replacement keeps that task id (Celery's results resolve through it) but gets a job of its
own, whose parent is the replacer's job.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

#: Options Celery sets on a signature it sends as part of a canvas.
CANVAS_OPTIONS = (
    "group_id",
    "chord",
    "chain",
    "link",
    "link_error",
    "parent_id",
    "replaced_task_nesting",
)


def in_canvas(task_id: str | None, options: Mapping[str, Any]) -> bool:
    """A frozen task id sent with one of Celery's canvas options: something waits on it."""
    return task_id is not None and any(options.get(name) for name in CANVAS_OPTIONS)


def ids(task_id: str | None, options: Mapping[str, Any]) -> tuple[str, str, bool]:
    """``(job id, the message's task id, sent in a canvas)`` of a call given ``task_id``.

    The job id is the task id given, else a new one; a replacement (``self.replace``) gets
    a new job id while its message keeps the replacer's task id, frozen by Celery.
    """
    replacement = bool(options.get("replaced_task_nesting"))
    job_id = str(uuid.uuid4()) if task_id is None or replacement else task_id
    return job_id, task_id or job_id, in_canvas(task_id, options)
