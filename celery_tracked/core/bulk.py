"""What a bulk action (``Tracker.retry_many``/``cancel_many``, ``services/bulk.py``) did.
Pure: a value."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class BulkReport:
    """What ``Tracker.retry_many`` / ``cancel_many`` did.

    ``changed``: the ids of the jobs it moved; ``refused``: job id → why it was not moved
    (it moved meanwhile, a redacted argument is needed, the broker refused...);
    ``more``: other jobs matched beyond ``limit`` (run it again to act on them);
    ``skipped``: job id → why it was left alone on purpose (a bulk retry's ``Unrecoverable``
    failures, unless asked to include them), not a refusal.
    """

    action: str
    changed: tuple[str, ...] = ()
    refused: Mapping[str, str] = field(default_factory=dict)
    more: bool = False
    skipped: Mapping[str, str] = field(default_factory=dict)

    @property
    def matched(self) -> int:
        return len(self.changed) + len(self.refused) + len(self.skipped)

    def as_dict(self) -> dict[str, Any]:
        """Stable JSON keys: action, matched, changed, refused, skipped, more."""
        return {
            "action": self.action,
            "matched": self.matched,
            "changed": list(self.changed),
            "refused": dict(self.refused),
            "skipped": dict(self.skipped),
            "more": self.more,
        }
