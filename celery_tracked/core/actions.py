"""The action log, pure: what an operator did by hand (the dashboard's retry, cancel,
bulk actions, pause and resume, cleanup dry-run) and who did it.

One row of ``background_job_actions`` per action (:class:`Action`), newest first by id;
each job it changed also gets an ``action`` event in its history, naming the actor
(:func:`event_message`). Every text is masked before it is stored (the caller's
``Settings.masking``), and none holds a payload value or a result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, Protocol

#: The longest ``detail`` stored (the refusals' summary).
MAX_DETAIL = 2000
#: The longest actor, role, action name and target stored (the columns' widths).
MAX_NAME = 255
#: The job events of one recorded action, at most (a bulk action's limit is larger: the
#: action row counts them all, the first ones get the event).
MAX_EVENTS = 1000


@dataclass(frozen=True)
class Done:
    """An action to record (``Tracker.record_action``): ``actor`` in ``role`` did
    ``action`` to ``target``; ``changed``: the ids of the jobs it moved; ``refused``: job
    id → why it did not move."""

    actor: str
    role: str
    action: str
    target: str
    changed: Sequence[str] = ()
    refused: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Action:
    """One ``background_job_actions`` row: who (``actor``, ``role``) did what
    (``action``: ``retry``, ``cancel``, ``cancel_running``, ``retry_many``,
    ``cancel_many``, ``pause``, ``resume``, ``cleanup_dry_run``...) to what (``target``: a
    job id, a pipeline, a queue, the filters of a bulk action), with how many jobs it
    changed and refused, and why (``detail``); ``created_at`` on the database's clock."""

    id: int
    actor: str
    role: str
    action: str
    target: str
    changed: int
    refused: int
    detail: str | None
    created_at: datetime

    @classmethod
    def from_row(cls, row: Mapping[Any, Any]) -> Action:
        return cls(**{f.name: row[f.name] for f in fields(cls)})

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (``created_at`` ISO 8601)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["created_at"] = self.created_at.isoformat()
        return out


def clipped(text: str | None, limit: int = MAX_NAME) -> str | None:
    """``text`` cut to ``limit`` characters (an ellipsis marks the cut)."""
    if text is None or len(text) <= limit:
        return text
    return text[: limit - 1] + "…"


def event_message(action: str, actor: str, role: str) -> str:
    """The message of the ``action`` event a recorded action leaves on each job it
    changed: ``retry by alice (admin)``."""
    return clipped(f"{action} by {actor} ({role})", MAX_DETAIL) or ""


def refusals(refused: Mapping[str, str], shown: int = 20) -> str | None:
    """The first ``shown`` refusals as ``job: why`` lines (None: nothing refused)."""
    if not refused:
        return None
    lines = [f"{job_id}: {why}" for job_id, why in list(refused.items())[:shown]]
    if len(refused) > shown:
        lines.append(f"... and {len(refused) - shown} more")
    return clipped("\n".join(lines), MAX_DETAIL)


class ActionStore(Protocol):
    """The action log's store role (``store/actions.py``; in :class:`~.ports.Store`): an
    entry per action done by hand, with an ``action`` event on each job of ``job_ids``, in
    one transaction (``created_at``: the database's clock); the entries newest first."""

    def record_action(self, row: Mapping[str, Any], job_ids: Sequence[str]) -> int: ...

    def actions(self, before: int | None, limit: int) -> list[Action]: ...
