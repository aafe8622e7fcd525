"""The action log in memory (``store/actions.py``): the actions by id, and the ``action``
event on each job an action changed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...core.actions import Action
from ...core.jobs import Event
from .rows import MemoryCore

_COLUMNS = ("actor", "role", "action", "target", "changed", "refused", "detail")


class MemoryActions(MemoryCore):
    """The memory store's action log (see the module's docstring)."""

    def record_action(self, row: Mapping[str, Any], job_ids: Sequence[str]) -> int:
        """``INSERT_ACTION`` and ``INSERT_ACTION_EVENT`` (a job gone meanwhile: no event)."""
        with self.lock:
            now = self.time()
            values = {name: row[name] for name in _COLUMNS}
            entry = Action(len(self.action_log) + 1, **values, created_at=now)
            self.action_log.append(entry)
            for job_id in job_ids:
                job = self.rows.get(job_id)
                if job is not None:
                    self.append_event(job, Event.ACTION.value, now, row["message"])
            return entry.id

    def actions(self, before: int | None, limit: int) -> list[Action]:
        """``SELECT_ACTIONS``: newest first, below ``before``."""
        with self.lock:
            found = [a for a in self.action_log if before is None or a.id < before]
        return sorted(found, key=lambda a: a.id, reverse=True)[:limit]
