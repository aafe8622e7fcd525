"""The action log's service: ``Tracker.record_action`` and ``Tracker.actions``
(``core/actions.py``). Each text is masked (URL credentials, secret ``key=value`` pairs)
and clipped to its column before it is stored; a bulk action's first
:data:`~celery_tracked.core.actions.MAX_EVENTS` changed jobs get the ``action`` event.
"""

from __future__ import annotations

import logging
from typing import Any

from ..core.actions import (
    MAX_EVENTS,
    MAX_NAME,
    Action,
    ActionStore,
    Done,
    clipped,
    event_message,
    refusals,
)
from ..core.errors import InvalidFilter
from ..core.redact import Redaction

logger = logging.getLogger("celery_tracked")


def record(store: ActionStore, masking: Redaction, done: Done) -> int:
    """Store the action and its job events; log one line (actor, action, target, counts:
    no job data). The action's id."""

    def shown(text: str, limit: int = MAX_NAME) -> str:
        return clipped(masking.mask(text), limit) or ""

    row: dict[str, Any] = {
        "actor": shown(done.actor),
        "role": shown(done.role, 32),
        "action": shown(done.action, 32),
        "target": shown(done.target),
        "changed": len(done.changed),
        "refused": len(done.refused),
        "detail": refusals({k: masking.mask(v) for k, v in done.refused.items()}),
    }
    row["message"] = event_message(row["action"], row["actor"], row["role"])
    key = store.record_action(row, list(done.changed)[:MAX_EVENTS])
    logger.info(
        "%s by %s (%s) on %s: %d changed, %d refused",
        *(row[name] for name in ("action", "actor", "role", "target", "changed", "refused")),
        extra={"action": row["action"], "actor": row["actor"]},
    )
    return key


#: the largest action id (the column is a 64-bit integer)
MAX_ID = 2**63 - 1


def page(store: ActionStore, before: int | None, limit: int) -> list[Action]:
    """The actions newest first, below ``before``; a bad ``before`` is ``InvalidFilter``."""
    if before is not None and (
        isinstance(before, bool) or not isinstance(before, int) or not 1 <= before <= MAX_ID
    ):
        raise InvalidFilter(f"before: an action id (1 to {MAX_ID}), not {before!r}")
    return store.actions(before, limit)
