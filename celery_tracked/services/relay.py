"""The relay: publish the jobs whose producer died between its insert and its publish.

A producer inserts the pending row, publishes, then records ``published_at``. One that
dies in between (OOM, a gunicorn timeout, a deploy) leaves a pending row no message will
ever run, and its idempotency key would deduplicate every later enqueue onto it. The relay
finds such rows once they are older than ``tracked_relay_grace_seconds``, takes each with
one conditional ``UPDATE`` (so relays may run in many workers at once: a row goes to one
of them), publishes it from the row and records the hand-over (a ``relayed`` event).

A producer whose publish *failed* deletes its row before raising ``EnqueueError``, so the
relay never runs what a caller was told had failed; if a relay took the row first, the
producer's undo finds it handed over and returns the job instead of an error.

A row whose payload holds redacted values is re-sent as it was called from their sealed
copy (``tracked_secret_key``, ``sealing.py``). Without one (no key when it was created),
or when no key of this process opens it, it cannot be: the relay cancels it, with the
reason, rather than run it with the redaction marker. A relay in a process with no
``tracked_secret_key`` at all leaves a sealed row alone (its claim lapses): a relay that
has the key publishes it. Knows nothing of Celery: the ``publish`` callable is handed in
(the wiring's, through its platform: ``rerun.publisher``).

A row not due yet (a held job: ``deadlines.py``) is left to the scheduler pass
(``schedule.py``), which publishes it with the rest of its countdown; the relay takes only
pending rows already due (a retrying row a pause held goes out with the rest of its
backoff). A row past its deadline is cancelled (``DeadlineExceeded``), never published.

A maintenance plugin (``maintenance.py``): ``Tracker.relay()``, the task
``celery_tracked.relay`` every ``tracked_relay_interval_seconds``, ``celery tracked relay``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import ClassVar

from ..core.circuits import HELD_BY_CIRCUIT
from ..core.deadlines import deadline_message, past_deadline
from ..core.hooks import Hooks, Transition
from ..core.jobs import Event, Job, JobStatus, utcnow
from ..core.pauses import HELD_BY_PAUSE
from ..core.ports import RelayStore
from ..core.redact import mask_url
from ..core.settings import Settings
from .lease import owner_id
from .maintenance import Maintenance, Parts
from .sealing import NO_KEY_HERE, NoKeyHere, SealBroken, unsendable

logger = logging.getLogger("celery_tracked")

#: How long a relay holds a row it publishes; if it dies, another relay retries after it.
CLAIM_S = 30.0
RELAYED_MESSAGE = "published by the relay: its producer never handed it to the broker"
#: The event of a row a pause held in the database, published once no pause covers it.
RESUMED_MESSAGE = (
    "published on resume: it was held in the database by a pause (see its paused event), "
    "and no pause covers it any more"
)
#: The ``relayed`` event of a job an open circuit held, published once it closed.
CLOSED_MESSAGE = (
    "published as its circuit closed: it was held in the database while the circuit was "
    "open (see its circuit_open event)"
)
REDACTED_REASON = (
    "its producer died before publishing it and its arguments were redacted, so it "
    "cannot be re-sent as called: run it again with tracker.retry(job_id, "
    "arguments={...the redacted ones...}), or enqueue it again (set tracked_secret_key "
    "so that such jobs are re-sent)"
)


@dataclass
class RelayReport:
    """What one pass of the relay did, by job id."""

    published: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    #: sealed, and this process has no key: left for a relay that has one
    left: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, list[str]]:
        return {
            "published": list(self.published),
            "cancelled": list(self.cancelled),
            "failed": list(self.failed),
            "left": list(self.left),
        }


class Relay(Maintenance):
    """Publishes pending rows whose message was never handed to the broker."""

    name: ClassVar[str] = "relay"
    summary: ClassVar[str] = (
        "Publish the pending jobs whose message was never handed to the broker (their "
        'producer died before its publish; docs/lifecycle.md, "The relay"): one pass.'
    )
    idle: ClassVar[str] = "nothing to relay"
    moved: ClassVar[tuple[str, ...]] = ("published", "cancelled")

    def __init__(
        self,
        store: RelayStore,
        grace_s: float,
        cancel: Callable[[str, str], bool],
        publish: Callable[[Job], None],
        keyed: bool = True,
        hooks: Hooks | None = None,
    ) -> None:
        self.store: RelayStore = store
        self.hooks = hooks
        self.grace_s = grace_s
        self.cancel = cancel
        self.publish = publish
        #: this process has a ``tracked_secret_key``: else a sealed row is left unclaimed
        self.keyed = keyed

    @classmethod
    def schedule(cls, settings: Settings) -> float | None:
        return settings.relay_interval_seconds or None

    @classmethod
    def build(cls, parts: Parts) -> Relay:
        settings = parts.settings
        keyed = bool(settings.secret_key)
        grace = settings.relay_grace_seconds
        return cls(parts.store, grace, parts.cancel, parts.publish, keyed, parts.hooks)

    def run(self, now: datetime | None = None) -> RelayReport:
        """One pass: relay every unpublished row older than the grace period (at most 100).

        A row's age is judged on the database's clock (``store.clock()``), never on this
        host's: a relay host whose clock runs ahead takes no row early. ``now=`` stands for
        another time to judge ages and deadlines by (tests, a fast-forward); whether a row
        is due is judged on the database's clock only (a held job is the scheduler pass's,
        which fast-forwards it: ``schedule.py``), so the relay never sends a message that
        waits long in the broker.

        Raises:
            StoreError: the database failed (the next pass starts over).
        """
        clock = self.store.clock()
        now = now or clock
        owner = f"relay:{owner_id()}:{uuid.uuid4().hex[:8]}"
        cutoff = now - timedelta(seconds=self.grace_s)
        report = RelayReport()
        for job_id in self.store.unpublished(cutoff=cutoff, now=min(now, clock)):
            seen = self.store.get(job_id)
            if seen is None:
                continue
            if not self.keyed and seen.secrets_sealed is not None:
                report.left.append(job_id)  # not even claimed: a keyed relay takes it
                continue
            claimed = self.store.relay_claim(
                job_id, owner=owner, now=now, lease_s=CLAIM_S, cutoff=cutoff
            )
            job = self.store.get(job_id) if claimed else None
            if job is not None:  # else published, taken by another relay, or moved meanwhile
                self._relay(job, owner, report, now, held_why(seen.locked_by))
        if report.left:
            logger.warning(
                "relay: %d job(s) with sealed arguments left alone: %s",
                len(report.left),
                NO_KEY_HERE,
            )
        return report

    def _relay(
        self, job: Job, owner: str, report: RelayReport, now: datetime, why: str | None = None
    ) -> None:
        """Send the claimed ``job``'s message (``now``: the pass's time, the database's
        clock): cancelled instead past its deadline, or when it cannot be sent as called.
        ``why``: its event's text (None: the pass's own)."""
        if past_deadline(job, now) and self._expire(job):
            report.cancelled.append(job.id)
            return
        if unsendable(job):
            self.cancel(job.id, REDACTED_REASON)
            report.cancelled.append(job.id)
            return
        try:
            self.publish(rest_of_wait(job, now))
        except NoKeyHere:  # sealed meanwhile: a relay with the key takes it once this claim lapses
            report.left.append(job.id)
            return
        except SealBroken as exc:  # no key here opens its sealed arguments: never sent
            self.cancel(job.id, str(exc))
            report.cancelled.append(job.id)
            return
        except Exception as exc:
            logger.warning(
                "relay could not publish job %s: %s (retried in %s s)",
                job.id,
                mask_url(str(exc)),
                CLAIM_S,
            )
            report.failed.append(job.id)
            return
        sent, revision = utcnow(), job.revision
        if not self._handed(job, owner, sent, why):  # claimed already, or a newer message
            self.store.handed_over(job.id, sent, revision)
        report.published.append(job.id)

    def _handed(self, job: Job, owner: str, sent: datetime, why: str | None = None) -> bool:
        """Mark the claimed row published (its event, ``relayed``, says ``why``: a pause
        lifted, else its producer never published it)."""
        if why is None:
            logger.warning("job %s %s", job.id, RELAYED_MESSAGE)
        else:
            logger.info("job %s %s", job.id, why)
        message = why or RELAYED_MESSAGE
        return self.store.relayed(
            job.id, owner=owner, now=sent, message=message, revision=job.revision
        )

    def _expire(self, job: Job) -> bool:
        """Cancel the waiting ``job`` at its deadline (``DeadlineExceeded``): True if done."""
        message = deadline_message(job)
        if not self.store.expire(job.id, now=utcnow(), message=message):
            return False
        if self.hooks is not None:
            told = f"job {job.id} {message}"
            self.hooks.after_transition(
                Transition.of(
                    Event.CANCELLED, job.id, told, JobStatus.CANCELLED, job.queue_name, job.job_type
                )
            )
        return True


def rest_of_wait(job: Job, now: datetime) -> Job:
    """``job`` with its due time moved onto this host's clock, so that the message a
    ``publish`` makes from it (``rerun.send_job``) carries the rest of its countdown as
    counted on the database's clock at ``now``."""
    if job.not_before is None:
        return job
    return replace(job, not_before=job.not_before + (utcnow() - now))


def held_why(locked_by: str | None) -> str | None:
    """The ``relayed`` event's text of a row held in the database (a pause's or a circuit's
    mark in ``locked_by``, read before the claim replaced it); None: the relay's own."""
    if locked_by == HELD_BY_PAUSE:
        return RESUMED_MESSAGE
    if locked_by is not None and locked_by.startswith(HELD_BY_CIRCUIT):
        return CLOSED_MESSAGE
    return None
