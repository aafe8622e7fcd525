"""The ``Tracker``'s controls over when and how much runs: pauses and circuit breakers.

A part of the facade (:class:`~celery_tracked.tracker.BaseTracker` inherits it), kept in
its own module so that each control is one block of methods over its service
(``services/pauses.py``, ``services/circuits.py``); docs/scheduling.md and docs/limits.md.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, TypeVar

from .core.circuits import Circuit
from .core.pauses import Pause
from .core.validation import check_now
from .services import pauses
from .services.circuits import ProbePass, ProbeReport
from .services.maintenance import Maintenance
from .services.relay import Relay

if TYPE_CHECKING:
    from .wiring import Services

M = TypeVar("M", bound=Maintenance)


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
        return self._plugin(ProbePass).run(check_now(now))

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
