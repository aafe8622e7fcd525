"""What a pool process last heard of each keyed rate limit: the hint its keyed hook reads
before the claim (``services/limits.py``, ``KeyedRateLimit.before_claim``), kept by the
limiters of ``limiter.py`` from each answer of theirs (no round trip of its own)."""

from __future__ import annotations

import time
from typing import Any

from ..core.rates import Turn


class Hints:
    """What this process last heard of each key (``rates.free_at``): the milliseconds
    until a fresh delivery may be granted, on this process's monotonic clock (never on
    Redis's: only a span is carried). They only grow, so a hint still ahead says surely
    refused (unless Redis lost the state: then the delivery asks, finds room and claims)."""

    #: Keys remembered before the passed ones are dropped.
    KEEP = 4096

    def __init__(self) -> None:
        self._until: dict[str, float] = {}

    def note(self, turns: tuple[Turn, ...], free_ms: Any) -> None:
        now = time.monotonic()
        if len(self._until) > self.KEEP:
            self._until = {k: t for k, t in self._until.items() if t > now}
        for turn, ms in zip(turns, free_ms, strict=True):
            self._until[turn.key] = now + float(ms) / 1000

    def free_in(self, turns: tuple[Turn, ...]) -> float:
        now = time.monotonic()
        return max((self._until.get(t.key, now) - now) * 1000 for t in turns)
