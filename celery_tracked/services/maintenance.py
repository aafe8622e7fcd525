"""Maintenance plugins: the passes that keep one app's tracking database moving and small,
each in one shape (Oban's plugins).

A plugin is a :class:`Maintenance` class: its ``name`` (a verb: the shared task
``celery_tracked.<name>``, the command ``celery tracked <name>``, the method
``Tracker.<name>()``), its default schedule read from the settings (:meth:`schedule`),
and one pass, :meth:`run`, returning a report with ``as_dict()``. The wiring builds each
once (:meth:`build`, given the wiring's own :class:`Parts`: the publish goes through the
wiring's platform); the adapter gives each a shared task and a default Beat entry
(``adapter/beat.py``), the CLI a command (``cli/maintenance.py``), each in one loop over
the wiring's list, ``celery_tracked.wiring.MAINTENANCE``:

- ``relay`` (``relay.py``): publishes the rows whose producer died before its publish;
- ``schedule`` (``schedule.py``): publishes the held jobs as they come due;
- ``reap`` (``reaper.py``): rescues or abandons the jobs nothing will move any more;
- ``cleanup`` (``cleanup.py``): removes the ended jobs past their retention;
- ``probe`` (``circuits.py``): half-opens the circuit breakers whose cool-down ended and
  publishes their probes, and the jobs of closed circuits still held.

Adding a plugin is its file (a :class:`Maintenance` subclass) and one line: its class in
``MAINTENANCE`` (with its import). Every pass may run in many processes at once.

Every pass run through the ``Tracker`` (its Beat task, its command, its method; not a
cleanup dry run) is recorded by :class:`Recorder`: one upsert of the plugin's row of
``background_job_maintenance`` (``core/maintenance.py``), read by ``Tracker.maintenance()``
and judged against each plugin's schedule by :func:`known`.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, ClassVar, Protocol, TypeVar

from ..core.guard import Guard
from ..core.hooks import Hooks
from ..core.jobs import Job
from ..core.maintenance import MaintenanceRun, MaintenanceStore, Pass, counts_of, every_s, jobs_of
from ..core.platform import Platform
from ..core.ports import Store
from ..core.redact import Redaction, error_type
from ..core.settings import Settings

logger = logging.getLogger("celery_tracked")

R = TypeVar("R", bound="Report")


class Report(Protocol):
    """What one pass did."""

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready values (what the shared task returns, ``--json``)."""
        ...


@dataclass(frozen=True)
class Parts:
    """What the wiring hands each plugin it builds: its own, shared (nothing is built
    twice)."""

    settings: Settings
    store: Store
    guard: Guard
    hooks: Hooks
    #: the platform port (``core/platform.py``): the tasks' descriptions, the broker's view
    platform: Platform
    #: sends a job's message from its row, through ``platform`` (``rerun.publisher``)
    publish: Callable[[Job], None]
    #: ``Tracker.cancel(job_id, reason)``
    cancel: Callable[[str, str], bool]


class Maintenance(ABC):
    """One maintenance plugin (see the module's text)."""

    #: the feature's one name: its task, its command, its ``Tracker`` method
    name: ClassVar[str]
    #: one line: the shared task's docstring and the command's help
    summary: ClassVar[str]
    #: what the command prints when a pass found nothing to do
    idle: ClassVar[str] = "nothing to do"
    #: the report's counts of the jobs a pass moved (its recorded ``jobs``)
    moved: ClassVar[tuple[str, ...]] = ()

    @classmethod
    @abstractmethod
    def schedule(cls, settings: Settings) -> object:
        """When its default Beat entry runs: seconds (a float), a 5-field crontab string
        (Beat's timezone), a Celery schedule object, or None (no default entry)."""

    @classmethod
    @abstractmethod
    def build(cls, parts: Parts) -> Maintenance:
        """The plugin of one wiring (built once)."""

    @abstractmethod
    def run(self, now: datetime | None = None) -> Report:
        """One pass; ``now``: the time it judges ages at (default: the database's clock,
        or this host's, as each says). Raises ``StoreError`` if the database failed (the
        next pass starts over)."""


class Recorder:
    """Records each pass of a plugin (one upsert, :class:`~..core.maintenance.Pass`); a
    failure to record never fails the pass: it is logged, once until a record succeeds."""

    def __init__(self, store: MaintenanceStore, masking: Redaction) -> None:
        self.store = store
        self.masking = masking
        self._failing = False

    def run(self, plugin: Maintenance, run: Callable[[], R]) -> R:
        """``run()`` (one pass of ``plugin``), recorded: its counts, or its masked error
        (then re-raised)."""
        started = time.monotonic()
        try:
            report = run()
        except Exception as exc:
            error = f"{error_type(exc)}: {self.masking.summarize(exc)}"
            self._record(Pass(plugin.name, {}, 0, error, time.monotonic() - started))
            raise
        counts = counts_of(report.as_dict())
        jobs = jobs_of(counts, plugin.moved)
        self._record(Pass(plugin.name, counts, jobs, None, time.monotonic() - started))
        return report

    def _record(self, done: Pass) -> None:
        try:
            self.store.record_maintenance(done)
        except Exception as exc:  # the pass's own outcome stands, whatever failed here
            if not self._failing:
                logger.warning("could not record the %s pass (%s); its work stands", done.name, exc)
            self._failing = True
        else:
            self._failing = False


def known(
    runs: Sequence[MaintenanceRun],
    plugins: Mapping[str, Maintenance],
    settings: Settings,
    read_at: datetime,
) -> list[MaintenanceRun]:
    """One entry per plugin of ``plugins`` (in their order): its recorded row (or an
    empty one: never run), with its default schedule's ``every_s`` and ``read_at`` (the
    database's clock), so that its age and staleness are judged there."""
    by_name = {run.name: run for run in runs}
    return [
        replace(
            by_name.get(name, MaintenanceRun(name)),
            every_s=every_s(type(plugin).schedule(settings)),
            read_at=read_at,
        )
        for name, plugin in plugins.items()
    ]
