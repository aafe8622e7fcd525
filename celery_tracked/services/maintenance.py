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
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Protocol

from ..core.guard import Guard
from ..core.hooks import Hooks
from ..core.jobs import Job
from ..core.platform import Platform
from ..core.ports import Store
from ..core.settings import Settings


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
