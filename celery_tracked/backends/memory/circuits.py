"""Circuit breakers in memory (``store/circuits.py``): the circuits by name, each change
under the store's lock with the SQL statement's condition (its name in the docstring),
judged on the store's clock, and the moves of the jobs an open circuit holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from ...core.circuits import CLOSED, HALF_OPEN, OPEN, Circuit, CircuitRule, held_by
from ...core.jobs import CLAIMABLE, Job, utcnow
from .rows import MemoryCore


class MemoryCircuits(MemoryCore):
    """The memory store's circuits (see the module's docstring)."""

    def circuit(self, name: str) -> Circuit | None:
        """``SELECT_CIRCUIT``."""
        with self.lock:
            return self.breakers.get(name)

    def circuits(self) -> list[Circuit]:
        """``SELECT_CIRCUITS``: by name."""
        with self.lock:
            return sorted(self.breakers.values(), key=lambda b: b.name)

    def _change(self, name: str, create: bool, change: Any) -> bool:
        """One change of the circuit ``name`` (``change(circuit, now)``: its new value, or
        None when its condition does not hold); ``create``: a closed row first if none."""
        with self.lock:
            now = self.time()
            found = self.breakers.get(name)
            if found is None and create:
                found = Circuit(name, updated_at=now)
                self.breakers[name] = found
            changed = None if found is None else change(found, now)
            if changed is None:
                return False
            self.breakers[name] = replace(changed, updated_at=now)
            return True

    @staticmethod
    def _opened(b: Circuit, now: datetime, cooldown_s: float | None, reason: str | None) -> Circuit:
        reopen = None if cooldown_s is None else now + timedelta(seconds=cooldown_s)
        return replace(
            b,
            state=OPEN,
            opened_at=now,
            reopen_at=reopen,
            opened_by=None,
            reason=reason,
            opened_count=b.opened_count + 1,
            probe_job_id=None,
            probe_until=None,
        )

    @staticmethod
    def _closed(b: Circuit, now: datetime) -> Circuit:
        return replace(
            b,
            state=CLOSED,
            opened_by=None,
            reason=None,
            reopen_at=None,
            probe_job_id=None,
            probe_until=None,
            closed_at=now,
            failures=0,
            window_started_at=None,
        )

    def circuit_failed(self, rule: CircuitRule, reason: str) -> Circuit | None:
        """``FAIL``."""

        def change(b: Circuit, now: datetime) -> Circuit | None:
            if b.state != CLOSED:
                return None
            start = b.window_started_at
            in_window = start is not None and start > now - timedelta(seconds=rule.window_s)
            failures = b.failures + 1 if in_window else 1
            counted = replace(b, failures=failures, window_started_at=start if in_window else now)
            if failures < rule.threshold:
                return counted
            return self._opened(counted, now, rule.cooldown_s, reason)

        self._change(rule.name, True, change)
        return self.circuit(rule.name)

    def half_open(self, name: str) -> bool:
        """``HALF_OPEN_AFTER_COOLDOWN``."""

        def change(b: Circuit, now: datetime) -> Circuit | None:
            due = b.reopen_at is not None and b.reopen_at <= now
            if b.state != OPEN or b.opened_by is not None or not due:
                return None
            return replace(b, state=HALF_OPEN, probe_job_id=None, probe_until=None)

        return self._change(name, False, change)

    def take_probe(self, name: str, job_id: str, *, lease_s: float) -> bool:
        """``TAKE_PROBE``."""

        def change(b: Circuit, now: datetime) -> Circuit | None:
            lapsed = b.probe_until is not None and b.probe_until < now
            if b.state != HALF_OPEN or not (b.probe_job_id in (None, job_id) or lapsed):
                return None
            probes = b.probes if b.probe_job_id == job_id else b.probes + 1
            until = now + timedelta(seconds=lease_s)
            return replace(b, probes=probes, probe_job_id=job_id, probe_until=until)

        return self._change(name, False, change)

    def probe_ended(self, rule: CircuitRule, job_id: str, failed: str | None) -> bool:
        """``PROBE_PASSED`` or ``PROBE_FAILED``."""

        def change(b: Circuit, now: datetime) -> Circuit | None:
            if b.state != HALF_OPEN or b.probe_job_id != job_id:
                return None
            if failed is None:
                return self._closed(b, now)
            return self._opened(b, now, rule.cooldown_s, failed)

        return self._change(rule.name, False, change)

    def by_hand(self, name: str, opened_by: str | None, reason: str | None) -> bool:
        """``OPEN_BY_HAND``, or ``CLOSE_BY_HAND`` (``opened_by`` None)."""

        def change(b: Circuit, now: datetime) -> Circuit | None:
            if opened_by is None:
                return None if b.state == CLOSED else self._closed(b, now)
            if b.state == OPEN and b.opened_by is not None:
                return None
            return replace(self._opened(b, now, None, reason), opened_by=opened_by)

        return self._change(name, opened_by is not None, change)

    def circuit_held(self, name: str, limit: int = 100) -> list[str]:
        """``SELECT_HELD``: longest held first."""
        by = held_by(name)
        with self.lock:
            found = [j for j in self.rows.values() if j.locked_by == by and j.published_at is None]
        found.sort(key=lambda j: (j.updated_at, j.created_at))
        return [j.id for j in found[:limit]]

    def probe_claim(self, job_id: str, circuit: str, owner: str, lease_s: float) -> bool:
        """``PROBE_CLAIM``: no event, ``updated_at`` kept."""

        def check(job: Job) -> bool:
            until = job.locked_until
            unsent = job.published_at is None and (until is None or until < self.time())
            return job.locked_by == held_by(circuit) and unsent

        def change(_: Job) -> Mapping[str, Any]:
            return {"locked_by": owner, "locked_until": self.at(lease_s)}

        return self.move(job_id, CLAIMABLE, check, change) is not None

    def probe_sent(self, job_id: str, owner: str, revision: int, message: str) -> bool:
        """``PROBE_SENT``: as ``RELAYED``, with its own event."""
        hand = {"owner": owner, "now": utcnow(), "message": message, "revision": revision}
        return self.handed_over_by(job_id, CLAIMABLE, "circuit_probe", hand)
