"""The ``Tracker``'s controls over when and how much runs: pauses and circuit breakers,
and what the maintenance plugins did (``maintenance()``).

A part of the facade (:class:`~celery_tracked.tracker.BaseTracker` inherits it), kept in
its own module so that each control is one block of methods over its service
(``services/pauses.py``, ``services/circuits.py``, ``services/maintenance.py``);
docs/scheduling.md, docs/limits.md and docs/operations.md.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, TypeVar

from .core.circuits import Circuit
from .core.maintenance import MaintenanceRun
from .core.pauses import Pause
from .core.validation import check_now
from .services import pauses
from .services.circuits import ProbePass, ProbeReport
from .services.maintenance import Maintenance, Report, known
from .services.relay import Relay

if TYPE_CHECKING:
    from .wiring import Services

M = TypeVar("M", bound=Maintenance)
R = TypeVar("R", bound=Report)


class Controls:
    """Pause and resume, and the circuit breakers, of one app's tracker."""

    _services: Services

    def _plugin(self, kind: type[M]) -> M:
        raise NotImplementedError  # BaseTracker's: the app's plugin of that kind

    def pause(
        self,
        queue: str | None = None,
        job_type: str | None = None,
        *,
        everything: bool = False,
        reason: str | None = None,
        by: str | None = None,
    ) -> Pause:
        """Pause one scope: ``queue=``, ``job_type=`` or ``everything=True``
        (``services/pauses.py``; docs/scheduling.md): the pause in force. ``by`` defaults to
        user@host.

        Raises:
            InvalidPause: not exactly one scope, or an unknown queue or job type (nothing
                written).
            StoreError: the database failed.
        """
        return self._services.pauses.pause(queue, job_type, everything, reason=reason, by=by)

    def resume(
        self, queue: str | None = None, job_type: str | None = None, *, everything: bool = False
    ) -> bool:
        """Lift a pause (False: it was not paused) and publish the jobs it held, oldest
        first (a relay pass at once; Beat's relay covers a resumer that died)."""
        resumed = self._services.pauses.resume(queue, job_type, everything)
        pauses.release(self._plugin(Relay))
        return resumed

    def paused(self) -> list[Pause]:
        """Every pause in force: ``scope``, ``name``, ``paused_by``, ``paused_at``,
        ``reason``."""
        return self._services.pauses.paused()

    def probe(self, *, now: datetime | None = None) -> ProbeReport:
        """One pass of the circuit breakers' plugin (``services/circuits.py``)."""
        now = check_now(now)  # InvalidFilter: before the pass, not recorded
        plugin = self._plugin(ProbePass)
        return self._recorded(plugin, lambda: plugin.run(now))

    def circuits(self) -> list[Circuit]:
        """Every circuit, its state, counts, history and held jobs (docs/limits.md)."""
        return self._services.circuits.circuits()

    def open_circuit(
        self, name: str, *, reason: str | None = None, by: str | None = None
    ) -> Circuit:
        """Open ``name`` by hand: its jobs are held until :meth:`close_circuit`. Raises
        ``InvalidCircuit`` (an unknown name, a bad ``reason``/``by``), ``StoreError``."""
        return self._services.circuits.open(name, reason=reason, by=by)

    def close_circuit(self, name: str) -> bool:
        """Close ``name`` (False: it was closed); publish its held jobs, oldest first."""
        return self._services.circuits.close(name)

    def maintenance(self) -> list[MaintenanceRun]:
        """Each maintenance plugin's last recorded pass, in ``wiring.MAINTENANCE``'s order
        (``core/maintenance.py``): when it started and ended (the database's clock), its
        counts, whether it failed (``error``: the masked summary), its totals since its
        first recorded pass (``passes``, ``failures``, ``jobs_total``, ``since``); its
        ``age_s`` and ``stale`` (older than twice its default schedule) judged on the
        database's clock. A plugin never run through the tracker (its Beat task, its
        command, its method) has ``ran`` False.

        Raises:
            StoreError: the database failed.
        """
        store = self._services.store
        return known(
            store.maintenance(), self._services.maintenance, self._services.settings, store.clock()
        )

    def _recorded(self, plugin: Maintenance, run: Callable[[], R]) -> R:
        """``run()``, one pass of ``plugin``, recorded (``services/maintenance.py``)."""
        return self._services.recorder.run(plugin, run)
