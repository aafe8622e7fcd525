"""Circuit breakers: the worker's gate and count (a hook), the pass that half-opens a
cooled-down circuit and sends its probe (a maintenance plugin, ``probe``), and the
operations (``Tracker.circuits``/``open_circuit``/``close_circuit``).

The state is durable and shared: one row per circuit (``background_job_circuits``), each
change one conditional ``UPDATE`` on the database's clock, so every worker and every task
naming the circuit sees one state (``core/circuits.py``). A delivery of a task with a
circuit reads its row once (one primary-key ``SELECT``; a task without one costs nothing):

- ``closed`` (or no row): it runs. A counted error of its body adds one failure to the
  circuit's window; the ``threshold``-th within ``window_s`` opens it.
- ``open``: the delivery is held in the database as a pause holds one (``Wait(hold=True)``:
  one conditional ``UPDATE``, a ``circuit_open`` event, no attempt used, the message
  acknowledged: nothing spins through the broker).
- ``half_open``: the delivery that takes the probe (one conditional ``UPDATE``: none
  running, or the last one's time ran out) runs; the others are held. The probe's counted
  failure opens the circuit again for ``cooldown_s``; its end without one closes it and
  publishes the held jobs, oldest first (the relay, as a resume does).

Nobody has to watch the cool-down: the ``probe`` pass (Beat, every
``tracked_circuit_interval_seconds``) half-opens each circuit whose cool-down ended on the
database's clock and publishes one held job as its probe (a ``circuit_probe`` event), and
publishes the jobs of a closed circuit still held (a closer that died before). A circuit
opened by hand holds every job until closed by hand.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, ClassVar

from ..core.attempt import Attempt
from ..core.circuits import CLOSED, HALF_OPEN, OPEN, Circuit, CircuitRule
from ..core.errors import InvalidCircuit, StoreError
from ..core.hooks import Delivery, Hooks, Wait
from ..core.jobs import Job
from ..core.pauses import check_note
from ..core.platform import Platform
from ..core.ports import CircuitStore
from ..core.printable import visible
from ..core.redact import NO_KEYS, Redaction
from ..core.settings import Settings
from .lease import owner_id
from .maintenance import Parts
from .pauses import default_by, release
from .relay import CLAIM_S, Relay, RelayReport

logger = logging.getLogger("celery_tracked")

#: ``rule(task_name)``: the circuit a task names (None: none).
Rules = Callable[[str], CircuitRule | None]
PROBE_MESSAGE = "published by the probe pass: the half-open circuit's probe"
_LONGEST_REASON = 500


@dataclass
class ProbeReport(RelayReport):
    """What one probe pass did: the probes it published (``published``...), and how many
    jobs of closed circuits it released."""

    released: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {**super().as_dict(), "released": self.released}


@dataclass(frozen=True)
class _Raised:
    """What a body of a task with a circuit raised (attached to its attempt)."""

    error: BaseException


def names_of(platform: Platform) -> set[str]:
    """The circuits the tracked tasks of ``platform`` name."""
    return {d.circuit.name for d in platform.descriptions().values() if d.circuit is not None}


def rules_of(platform: Platform) -> Rules:
    """The circuit of each tracked task of ``platform``, by task name (read once per name)."""
    known: dict[str, CircuitRule | None] = {}

    def rule(task_name: str) -> CircuitRule | None:
        if task_name not in known:
            found = platform.descriptions().get(task_name)
            known[task_name] = None if found is None else found.circuit
        return known[task_name]

    return rule


class Circuits(Hooks):
    """The worker's gate and count, and the operations (module text)."""

    #: a delivery that cannot be held is delivered again after this long (seconds)
    WAIT_S = 5.0

    def __init__(
        self,
        store: CircuitStore,
        rules: Rules,
        names: Callable[[], set[str]],
        release: Callable[[], int],
        probe_s: float,
        redaction: Redaction = NO_KEYS,
    ) -> None:
        self.store = store
        self.rule = rules
        #: the circuits the app's tracked tasks name
        self.names = names
        #: publishes the jobs of the circuits now closed (relay passes)
        self.release = release
        #: how long a probe holds the half-open circuit before another may take it
        self.probe_s = probe_s
        self.redaction = redaction
        self._probing: set[str] = set()
        self._told: dict[str, datetime | None] = {}

    # -- the worker's gate and count ----------------------------------------------------

    def before_claim(self, delivery: Delivery) -> Wait | None:
        """Hold a delivery whose circuit is open (or half-open, the probe taken)."""
        rule = None if delivery.inline else self.rule(delivery.task_name)
        if rule is None:
            return None
        try:
            circuit = self.store.circuit(rule.name)
            if circuit is None or circuit.state == CLOSED:
                return None
            if circuit.state == HALF_OPEN and self.store.take_probe(
                rule.name, delivery.job_id, lease_s=self.probe_s
            ):
                self._probing.add(delivery.job_id)
                logger.warning("job %s probes circuit %r", delivery.job_id, visible(rule.name))
                return None
        except StoreError as exc:  # fail open: the database is the truth, and it is away
            logger.warning("circuit %r not read (the job runs): %s", visible(rule.name), exc)
            return None
        return Wait(self.WAIT_S, circuit.describe(), hold=True, circuit=rule.name)

    @contextmanager
    def _watching(self, attempt: Attempt) -> Iterator[None]:
        try:
            yield
        except BaseException as exc:
            attempt.attach(_Raised(exc))
            raise

    def running(self, attempt: Attempt) -> Any:
        """Remember what the body of a task with a circuit raised."""
        if attempt.run.inline or self.rule(attempt.run.task_name) is None:
            return super().running(attempt)
        return self._watching(attempt)

    def after_attempt(self, attempt: Attempt) -> None:
        """Count a counted failure; end the probe (closed: release the held jobs). A run in
        the caller's process (eager mode, ``apply()``) neither waits nor counts."""
        rule = None if attempt.run.inline else self.rule(attempt.run.task_name)
        if rule is None:
            return
        raised = attempt.part(_Raised)
        error = None if raised is None else raised.error
        signal = None if error is None else attempt.run.signals.read(error)
        counted = rule.counts(error) and signal is None
        probe = attempt.job_id in self._probing
        self._probing.discard(attempt.job_id)
        reason = self._reason(error) if counted else None
        try:
            if probe and self.store.probe_ended(rule, attempt.job_id, reason):
                self._probe_ended(rule, attempt.job_id, reason)
            elif reason is not None:
                self._failed(rule, reason)
        except StoreError as exc:
            logger.warning("circuit %r not updated: %s", visible(rule.name), exc)

    def _reason(self, error: BaseException | None) -> str:
        text = f"{type(error).__name__}: {error}"
        return visible(self.redaction.mask(text))[:_LONGEST_REASON]

    def _failed(self, rule: CircuitRule, reason: str) -> None:
        circuit = self.store.circuit_failed(rule, reason)
        if circuit is None or circuit.state != OPEN or circuit.opened_by is not None:
            return
        if self._told.get(rule.name) != circuit.opened_at:  # once per opening and process
            self._told[rule.name] = circuit.opened_at
            logger.warning(
                "circuit %r open after %d failures in %g s: %s (cool-down %g s)",
                visible(rule.name),
                circuit.failures,
                rule.window_s,
                circuit.reason,
                rule.cooldown_s,
            )

    def _probe_ended(self, rule: CircuitRule, job_id: str, reason: str | None) -> None:
        name = visible(rule.name)
        if reason is not None:
            logger.warning("circuit %r open again: its probe %s failed: %s", name, job_id, reason)
            return
        logger.warning("circuit %r closed: its probe %s passed", name, job_id)
        self.release()

    # -- the operations -----------------------------------------------------------------

    def circuits(self) -> list[Circuit]:
        """Every circuit, by name, each with how many jobs it holds now (up to 10,000)."""
        return [
            replace(c, held=len(self.store.circuit_held(c.name, 10_000)))
            for c in self.store.circuits()
        ]

    def open(self, name: str, *, reason: str | None = None, by: str | None = None) -> Circuit:
        """Open ``name`` by hand: every job of it is held until :meth:`close`.

        Raises:
            InvalidCircuit: a name no tracked task here names (nor a circuit row), or a bad
                ``reason``/``by`` (nothing was written).
            StoreError: the database failed.
        """
        self._check_known(name)
        try:
            reason = check_note(reason, "reason")
            by = self.redaction.mask(check_note(by, "by", 255) or default_by())
        except ValueError as exc:
            raise InvalidCircuit(str(exc)) from None
        reason = reason if reason is None else self.redaction.mask(reason)
        if self.store.by_hand(name, by, reason):
            logger.warning("circuit %r opened by %s: %s", visible(name), by, reason or "")
        found = self.store.circuit(name)
        assert found is not None  # opened: its row exists
        return found

    def close(self, name: str) -> bool:
        """Close ``name`` by hand and publish the jobs it held, oldest first; False
        when it was closed.

        Raises:
            InvalidCircuit: a name no tracked task here names (nor a circuit row).
            StoreError: the database failed.
        """
        self._check_known(name)
        closed = self.store.by_hand(name, None, None)
        if closed:
            logger.warning("circuit %r closed by %s", visible(name), default_by())
        self.release()
        return closed

    def _check_known(self, name: str) -> None:
        named = self.names()
        if name in named or self.store.circuit(name) is not None:
            return
        raise InvalidCircuit(
            f"unknown circuit {name!r}: no tracked task here names it "
            f"(known: {', '.join(sorted(named)) or 'none'})"
        )


class ProbePass(Relay):
    """Half-opens the circuits whose cool-down ended and publishes one held job of each as
    its probe; publishes the jobs of closed circuits still held (module text)."""

    name: ClassVar[str] = "probe"
    summary: ClassVar[str] = (
        "Half-open the circuits whose cool-down ended and publish one held job of each as "
        'its probe; publish the jobs of closed circuits still held (docs/limits.md, "Circuit '
        'breakers"): one pass.'
    )
    idle: ClassVar[str] = "no circuit to probe"
    moved: ClassVar[tuple[str, ...]] = ("published", "cancelled", "released")

    store: CircuitStore

    def __init__(self, store: CircuitStore, probe_s: float, parts: Parts) -> None:
        keyed = bool(parts.settings.secret_key)
        grace = parts.settings.relay_grace_seconds
        super().__init__(store, grace, parts.cancel, parts.publish, keyed, parts.hooks)
        self.store = store
        self.probe_s = probe_s
        #: the relay that publishes the jobs of the circuits now closed
        self.releaser = Relay(store, grace, parts.cancel, parts.publish, keyed, parts.hooks)

    @classmethod
    def schedule(cls, settings: Settings) -> float | None:
        return settings.circuit_interval_seconds or None

    @classmethod
    def build(cls, parts: Parts) -> ProbePass:
        return cls(parts.store, probe_seconds(parts.settings), parts)

    def run(self, now: datetime | None = None) -> ProbeReport:
        """One pass, judged at ``now`` (default: the database's clock).

        Raises:
            StoreError: the database failed (the next pass starts over).
        """
        now = now or self.store.clock()
        owner = f"probe:{owner_id()}:{uuid.uuid4().hex[:8]}"
        report, closed_held = ProbeReport(), False
        for circuit in self.store.circuits():
            due = circuit.reopen_at is not None and circuit.reopen_at <= now
            if (
                circuit.state == OPEN
                and not circuit.manual
                and due
                and self.store.half_open(circuit.name)
            ):
                logger.warning("circuit %r half-open", visible(circuit.name))
                circuit = replace(circuit, state=HALF_OPEN, probe_job_id=None)
            if circuit.probe_free(now):
                self._probe(circuit.name, owner, report, now)
            elif circuit.state == CLOSED and self.store.circuit_held(circuit.name, 1):
                closed_held = True
        if closed_held:
            report.released = self.release_held()
        return report

    def release_held(self) -> int:
        """Publish the jobs of the circuits now closed (relay passes); how many."""
        return release(self.releaser)

    def _probe(self, name: str, owner: str, report: RelayReport, now: datetime) -> None:
        """Publish the job ``name`` held longest as its probe (if it holds one)."""
        for job_id in self.store.circuit_held(name, 1):
            if not self.store.take_probe(name, job_id, lease_s=self.probe_s):
                return  # another pass took it
            if self.store.probe_claim(job_id, name, owner, CLAIM_S):
                job = self.store.get(job_id)
                if job is not None:
                    self._relay(job, owner, report, now)

    def _handed(self, job: Job, owner: str, sent: datetime, why: str | None = None) -> bool:
        """Mark the probe published (its event, ``circuit_probe``; ``why`` is the relay's)."""
        logger.warning("job %s %s", job.id, PROBE_MESSAGE)
        return self.store.probe_sent(job.id, owner, job.revision, PROBE_MESSAGE)


def probe_seconds(settings: Settings) -> float:
    """How long a probe holds a half-open circuit: twice the lease (its queue time and
    its run), then another delivery or pass may probe."""
    return settings.lease_seconds * 2
