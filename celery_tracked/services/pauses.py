"""Pause and resume, by queue, by job type, or everything: ``Tracker.pause``/``resume``/
``paused``, and the worker's gate (a hook).

The state is durable: one row per pause (``background_job_pauses``: who, when on the
database's clock, why), so a restarted worker or a new host honours it. Each worker
process reads the pauses at most once per :attr:`Pauses.TTL_S` (a per-process snapshot,
refreshed by the next delivery after it expired): a pause or a resume reaches every worker
within that and the time its next delivery takes to arrive; a delivery never costs a query
beyond it (nothing paused: one clock read and a loop over an empty tuple).

Running jobs finish. A delivery of a paused queue or job type is held in the database
(``before_claim`` asks the runner to hold it: ``Wait(hold=True)``): one conditional
``UPDATE`` gives the row back as it was (``pending`` or ``retrying``) with a new revision
and no message (``published_at`` NULL, ``locked_by = 'paused'``), a ``paused`` event, no
attempt used, and the message is acknowledged: nothing spins through the broker while it
waits. The relay and the reaper never publish or rescue a row a pause covers. ``resume``
deletes the pause and runs the relay at once, which publishes the held rows oldest first
(each with the rest of its due time); a resumer that dies before is covered by the relay's
next pass (Beat, ``tracked_relay_interval_seconds``). A row whose arguments were redacted
and not sealed (no ``tracked_secret_key``) cannot be rebuilt from the database: its
delivery is postponed instead (re-delivered every :attr:`Pauses.WAIT_S` seconds).
"""

from __future__ import annotations

import getpass
import logging
import socket
import time
from collections.abc import Callable, Iterable
from typing import Any

from ..core.errors import InvalidPause, StoreError
from ..core.hooks import Delivery, Hooks, Wait
from ..core.jobs import utcnow
from ..core.pauses import ALL, JOB_TYPE, QUEUE, Pause, check_note, holding, scope_of
from ..core.platform import Platform
from ..core.ports import PauseStore
from ..core.printable import visible
from ..core.redact import NO_KEYS, Redaction
from .relay import Relay

logger = logging.getLogger("celery_tracked")

#: ``known()``: the queues and the job types the app knows (``Platform.queues`` and its
#: tracked tasks' job types).
Known = Callable[[], tuple[Iterable[str], Iterable[str]]]


class Pauses(Hooks):
    """What is paused, for one app: the operations and the worker's gate (module text)."""

    #: how long a process trusts its snapshot of the pauses (seconds)
    TTL_S = 1.0
    #: a delivery that cannot be held is delivered again after this long (seconds)
    WAIT_S = 5.0

    def __init__(
        self, store: PauseStore, known: Known, ttl_s: float = TTL_S, redaction: Redaction = NO_KEYS
    ) -> None:
        self.store = store
        #: masks URL credentials and secret ``key=value`` pairs in a ``reason``/``by``: they
        #: are shown by ``paused()``, logged, and copied into every held job's event
        self.redaction = redaction
        self.known = known
        self.ttl_s = ttl_s
        self._snapshot: tuple[Pause, ...] = ()
        self._read_at = float("-inf")
        self._failing = False

    # -- the worker's gate --------------------------------------------------------------

    def current(self) -> tuple[Pause, ...]:
        """The pauses as this process last read them (again once older than ``ttl_s``);
        the database failing, the last ones read (logged once)."""
        now = time.monotonic()
        if now - self._read_at >= self.ttl_s:
            try:
                self._snapshot = tuple(self.store.pauses())
                self._failing = False
            except StoreError as exc:
                if not self._failing:
                    logger.warning("pauses not read (the last ones read hold): %s", exc)
                self._failing = True
            self._read_at = now
        return self._snapshot

    def before_claim(self, delivery: Delivery) -> Wait | None:
        """Hold a delivery a pause covers (never a run here: eager mode)."""
        if delivery.inline:
            return None
        pause = holding(self.current(), delivery.queue or "", delivery.job_type)
        if pause is None:
            return None
        return Wait(self.WAIT_S, pause.describe(), hold=True)

    # -- the operations -----------------------------------------------------------------

    def pause(
        self,
        queue: str | None = None,
        job_type: str | None = None,
        everything: bool = False,
        *,
        reason: str | None = None,
        by: str | None = None,
    ) -> Pause:
        """Pause the one scope given; the pause in force (the first one's, if it was
        paused already).

        Raises:
            InvalidPause: not exactly one scope, an unknown queue or job type, a bad
                ``reason``/``by`` (nothing was written).
            StoreError: the database failed.
        """
        scope, name = scope_of(queue, job_type, everything)
        reason = check_note(reason, "reason")
        reason = reason if reason is None else self.redaction.mask(reason)
        by = self.redaction.mask(check_note(by, "by", 255) or default_by())
        self._check_known(scope, name)
        created = self.store.pause(scope, name, by=by, reason=reason)
        self._read_at = float("-inf")  # this process sees it at once
        now_in_force = (p for p in self.store.pauses() if (p.scope, p.name) == (scope, name))
        found = next(now_in_force, None) or Pause(scope, name, by, utcnow(), reason)
        if created:
            logger.warning("%s", visible(found.describe()))
        else:
            logger.info("already paused: %s", visible(found.describe()))
        return found

    def resume(
        self, queue: str | None = None, job_type: str | None = None, everything: bool = False
    ) -> bool:
        """Lift the one scope given; False when it was not paused.

        Raises:
            InvalidPause: not exactly one scope, or a queue or job type neither known here
                nor paused (nothing was written).
            StoreError: the database failed.
        """
        scope, name = scope_of(queue, job_type, everything, "resume")
        lifted = self.store.resume(scope, name)
        self._read_at = float("-inf")
        if not lifted:
            # an unknown name is an error, a known one a no-op
            self._check_known(scope, name, "resume")
            return False
        what = "everything" if scope == ALL else f"{scope.replace('_', ' ')} {name!r}"
        logger.warning("%s resumed by %s", visible(what), default_by())
        return True

    def marked(self, stats: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """``Tracker.stats()``'s entries, each with ``paused``: the pause holding its queue
        (by name, or everything) as text, or None."""
        found = self.paused()
        self._snapshot, self._read_at = tuple(found), time.monotonic()
        for queue, entry in stats.items():
            pause = next((p for p in found if p.scope != JOB_TYPE and p.covers(queue, "")), None)
            entry["paused"] = None if pause is None else pause.describe()
        return stats

    def paused(self) -> list[Pause]:
        """Every pause in force, oldest first (read now, not the snapshot)."""
        return self.store.pauses()

    def _check_known(self, scope: str, name: str, action: str = "pause") -> None:
        if scope == ALL:
            return
        queues, job_types = self.known()
        names = set(queues) if scope == QUEUE else set(job_types)
        if name not in names:
            what = "queue" if scope == QUEUE else "job type"
            where = (
                "in the app's task_queues, task_default_queue, task_routes or a tracked "
                "task's queue"
                if scope == QUEUE
                else "the job type of a tracked task registered here"
            )
            raise InvalidPause(
                f"cannot {action} unknown {what} {name!r}: not {where}; "
                f"{action} one of the known ones ({', '.join(sorted(names)) or 'none'}), "
                "or everything"
            )


def known(platform: Platform) -> tuple[set[str], set[str]]:
    """The queues and the job types of the app on ``platform`` (its tracked tasks')."""
    job_types = {task.job_type for task in platform.descriptions().values()}
    return platform.queues(), job_types


def release(relay: Relay, passes: int = 100) -> int:
    """Publish the rows held by pauses now lifted (and any other the relay would): relay
    passes until one finds fewer than a full batch; how many were published."""
    published = 0
    for _ in range(passes):
        report = relay.run()
        published += len(report.published)
        if len(report.published) + len(report.failed) + len(report.cancelled) < 100:
            break
    return published


def default_by() -> str:
    """``user@host`` of this process."""
    try:
        user = getpass.getuser()
    except Exception:  # no user name in this environment (a container's uid)
        user = "?"
    return f"{user}@{socket.gethostname()}"
