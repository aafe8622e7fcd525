"""The composition root: one app's services, built once (:func:`build`).

:func:`build` makes, from the settings and the platform port (``core/platform.py``), the
job store (chosen from ``tracked_database_url``) and the guard and notifier (Redis, or
memory with ``tracked_memory_guard``), both injectable; the lease keeper, the hooks, the
``Producer`` and its ``Enqueuer``, the worker's ``Runner`` and ``TimeLimits``, the
``Resender``, the cancels and the maintenance plugins of :data:`MAINTENANCE`. It returns
them as :class:`Services`, which only the ``Tracker`` facade (``tracker.py``) holds;
:class:`CelerySide` is the narrow part of them the Celery adapter and the CLI use.
Imports no Celery.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from .backends.guard import MemoryGuard, RedisGuard
from .backends.limiter import MemoryLimiter, RedisLimiter
from .backends.memory import MemoryStore
from .core.conversions import MEMORY_URL
from .core.errors import ConfigurationError
from .core.guard import Guard, Notifier
from .core.hooks import HookChain, LogTransitions, NotifyTerminal
from .core.platform import Platform
from .core.ports import Store
from .core.redact import mask_url
from .core.settings import Settings
from .services.cancelling import Canceller, Stopper
from .services.circuits import Circuits, ProbePass, names_of, probe_seconds, rules_of
from .services.cleanup import Cleanup
from .services.enqueue import Enqueuer
from .services.handoff import SlotHandOff
from .services.lease import LeaseKeeper
from .services.limits import GlobalRateLimit, KeyedRateLimit
from .services.maintenance import Maintenance, Parts, Recorder
from .services.pauses import Pauses
from .services.pauses import known as pauses_known
from .services.pipelines import Successors
from .services.producer import Producer
from .services.reaper import Reaper
from .services.relay import Relay
from .services.reports import Reports
from .services.rerun import Resender, publisher
from .services.runner import Runner
from .services.schedule import Scheduler
from .services.sealing import Sealer, sealer_for
from .services.time_limits import TimeLimits
from .store import JobStore

#: The guard and notifier implementations (``backends/guard.py``): what ``build`` takes.
GuardBackend = RedisGuard | MemoryGuard

#: The maintenance plugins (``services/maintenance.py``), each built once per app by
#: :func:`build`; each gets a shared task and a default Beat entry (``adapter/beat.py``)
#: and a CLI command (``cli/maintenance.py``). A new plugin is its file and one line here.
MAINTENANCE: tuple[type[Maintenance], ...] = (Relay, Scheduler, Reaper, Cleanup, ProbePass)


@dataclass(frozen=True)
class CelerySide:
    """What the Celery adapter and the ``celery tracked`` CLI use of the services beyond
    the ``Tracker``'s public methods, and nothing more (``Tracker.celery_side``)."""

    settings: Settings
    #: every producer path: ``enqueue``/``apply_async``/``apply``, eager mode, ``enqueue_in``
    producer: Producer
    #: a delivery's run (``TrackedTask.__call__``)
    runner: Runner
    #: a run the time limit or a signal ended (``TrackedTask``, ``signals.py``)
    time_limits: TimeLimits
    #: a running step's ``then``/``otherwise`` (``pipelines.declare``)
    successors: Successors
    #: the transitions ``enqueue_in`` tells (``transactional.py``)
    hooks: HookChain
    #: the SQL store of ``enqueue_in`` and ``transaction`` (None: the memory store)
    sql_store: JobStore | None
    #: Redis's ``maxmemory-policy`` (None: unknown, or no Redis): the worker-start check
    eviction_policy: Callable[[], str | None]
    #: the database's clock: the CLI judges ages on it
    clock: Callable[[], datetime]
    #: how many pending jobs were never handed to the broker past the relay's grace
    #: (``celery tracked metrics``)
    relay_backlog: Callable[[], int]


class Services:
    """One app's services, built by :func:`build`: what the ``Tracker`` facade holds
    (privately: ``Tracker._services``, the test seam)."""

    def __init__(
        self, settings: Settings, platform: Platform, store: Store, backend: GuardBackend
    ) -> None:
        self.settings = settings
        self.platform = platform
        self.store = store
        self.backend = backend
        self.guard: Guard = backend
        self.notifier: Notifier = backend
        self.leases = LeaseKeeper(store, settings.lease_seconds)
        limiter = (
            MemoryLimiter()
            if isinstance(backend, MemoryGuard)
            else RedisLimiter(backend.client, settings.key_prefix)
        )
        self.successors = Successors(store, settings, platform)
        self.pauses = Pauses(store, lambda: pauses_known(platform), redaction=settings.masking)
        self.circuits = Circuits(
            store,
            rules_of(platform),
            lambda: names_of(platform),
            lambda: self._probe_pass().release_held(),
            probe_seconds(settings),
            settings.masking,
        )
        self.hooks = HookChain(
            [
                self.pauses,  # first: a held delivery takes no rate-limit slot
                self.circuits,
                NotifyTerminal(self.notifier),
                LogTransitions(),
                self.successors,
                GlobalRateLimit(limiter),
                KeyedRateLimit(limiter),
                Reports(store, settings),
            ]
        )
        if settings.metrics:
            from .services.metrics import MetricsHooks  # the optional ``prometheus`` extra

            self.hooks.add(MetricsHooks())
        self.enqueuer = Enqueuer(store, self.guard, settings.guard_ttl_seconds, self.hooks)
        self.producer = Producer(self.enqueuer, settings)
        self.runner = Runner(store, self.leases, self.hooks, settings)
        self.time_limits = TimeLimits(store, self.hooks, settings)
        self.sealer: Sealer | None = sealer_for(settings.secret_key)  # no cryptography
        self.resender = Resender(store, self.hooks, platform, settings.masking, self.sealer)
        self.enqueuer.again = self.resender.again  # a job id re-sent after its job ended
        self.canceller = Canceller(store, self.hooks)
        self.stopper = Stopper(store, self.hooks, self.leases, self.canceller, platform.terminate)
        publish = publisher(platform, self.sealer)  # the relay's and the reaper's
        self.hooks.add(SlotHandOff(store, publish))  # a freed concurrency slot handed on
        parts = Parts(settings, store, self.guard, self.hooks, platform, publish, self.canceller)
        #: the maintenance plugins by name, built once
        self.maintenance: dict[str, Maintenance] = {
            plugin.name: plugin.build(parts) for plugin in MAINTENANCE
        }
        #: records each pass run through the ``Tracker`` (``Tracker.maintenance()``)
        self.recorder = Recorder(store, settings.masking)

    def _probe_pass(self) -> ProbePass:
        found = self.maintenance[ProbePass.name]
        assert isinstance(found, ProbePass)
        return found

    def celery_side(self) -> CelerySide:
        """The narrow part the Celery adapter and the CLI use."""
        store, grace = self.store, timedelta(seconds=self.settings.relay_grace_seconds)
        sql_store = store if isinstance(store, JobStore) else None
        return CelerySide(  # in its fields' order
            self.settings, self.producer, self.runner, self.time_limits, self.successors,
            self.hooks, sql_store, self.backend.eviction_policy, store.clock,
            lambda: store.backlog(cutoff=store.clock() - grace),
        )  # fmt: skip

    def close(self) -> None:
        self.leases.stop()
        self.store.dispose()
        self.backend.close()


def build(
    settings: Settings,
    platform: Platform,
    *,
    store: Store | None = None,
    guard: GuardBackend | None = None,
) -> Services:
    """One app's services. ``store``: the job store (default: ``tracked_database_url``'s:
    ``memory://`` is the in-memory store, for tests and embedded use); ``guard``: the
    guard and notifier (default: Redis at ``tracked_redis_url``, or memory with
    ``tracked_memory_guard``).

    Raises:
        ConfigurationError: ``tracked_redis_url`` cannot be used, or ``tracked_secret_key``
            is set without the ``cryptography`` extra.
    """
    if store is None:
        store = (
            MemoryStore()
            if settings.database_url == MEMORY_URL
            else JobStore(settings.database_url, settings.database_pooler == "pgbouncer")
        )
    if guard is None:
        guard = _guard_of(settings)
    return Services(settings, platform, store, guard)


def _guard_of(settings: Settings) -> GuardBackend:
    if settings.memory_guard:
        return MemoryGuard(settings.key_prefix)
    try:
        return RedisGuard(settings.redis_url, settings.key_prefix)
    except ValueError as exc:
        raise ConfigurationError(
            "tracked_redis_url", f"cannot be used: {mask_url(str(exc))}"
        ) from None
