"""Prometheus metrics (the ``prometheus`` extra: ``pip install "celery-tracked[prometheus]"``).

Two kinds, served together by ``celery -A proj tracked metrics --port 9808``:

- **Counted where they happen** (:class:`MetricsHooks`, a hook on every transition, added
  by ``tracked_metrics = True``): transitions by event, queue and job type; how long runs
  took; deduplicated enqueues; rescued and abandoned jobs; deliveries postponed without
  using an attempt (rate limiter waits, a full concurrency key). Each process counts its
  own: under prefork the pool children and the server add up through prometheus_client's
  multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``, the same directory for the worker and
  the metrics server, on one host).
- **Read from the table when scraped** (:class:`TableCollector`): jobs by queue and status,
  the oldest pending job's age per queue, the relay's backlog and expired leases; one set
  of indexed queries, cached for ``cache_s`` seconds so a fast scraper does not load the
  database. A table that cannot be read (the database down, or not answering within
  ``timeout_s``) fails no scrape: ``celery_tracked_table_up`` is 0, the table's gauges are
  left out and the counters are served as always.

Counting costs one labelled counter increment per transition (well under a microsecond);
nothing is counted unless ``tracked_metrics`` is on.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.errors import ConfigurationError
from ..core.hooks import Hooks, Transition
from ..core.redact import first_line

try:  # the optional extra
    from prometheus_client import CollectorRegistry, Counter, Histogram, multiprocess
    from prometheus_client.core import GaugeMetricFamily, Metric
    from prometheus_client.registry import Collector
except ImportError:  # pragma: no cover - exercised by users without the extra
    _MISSING = True
else:
    _MISSING = False

PREFIX = "celery_tracked"
#: Run durations, in seconds: from 5 ms to an hour.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
#: The events whose ``duration_ms`` is a run's duration.
_RUN_ENDS = frozenset({"completed", "retrying", "failed"})
#: Postponed deliveries (no attempt used): a limiter's wait, a full concurrency key.
_WAITS = frozenset({"busy"})
ABANDONED = "abandoned"
#: How long a scrape waits for the table before it is served without the table's gauges.
READ_TIMEOUT_S = 5.0

logger = logging.getLogger("celery_tracked")


def require() -> None:
    """Raise ``ConfigurationError`` naming the extra when prometheus_client is missing."""
    if _MISSING:
        raise ConfigurationError(
            "tracked_metrics",
            'needs prometheus_client: pip install "celery-tracked[prometheus]"',
        )


def check_multiprocess_dir() -> None:
    """Raise ``ConfigurationError`` when ``PROMETHEUS_MULTIPROC_DIR`` is set but names no
    directory: every count would fail (prometheus_client writes a file per process there)."""
    path = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if path and not os.path.isdir(path):
        raise ConfigurationError(
            "tracked_metrics",
            f"PROMETHEUS_MULTIPROC_DIR={path} is not a directory: create it (empty) before "
            "the workers and the metrics server start",
        )


@dataclass(frozen=True)
class _Counters:
    transitions: Any
    durations: Any
    deduplicated: Any
    rescued: Any
    abandoned: Any
    waits: Any


@functools.cache
def _counters() -> _Counters:
    """The process's counters, created once (Prometheus registries are per process)."""
    require()
    labels = ("queue", "job_type")
    return _Counters(
        transitions=Counter(
            f"{PREFIX}_transitions",
            "Job transitions and delivery fates, by event.",
            ("event", *labels),
        ),
        durations=Histogram(
            f"{PREFIX}_run_duration_seconds",
            "How long a run took, by how it ended (completed, retrying, failed).",
            ("outcome", *labels),
            buckets=BUCKETS,
        ),
        deduplicated=Counter(
            f"{PREFIX}_deduplicated_enqueues", "Enqueues answered with an existing job.", labels
        ),
        rescued=Counter(f"{PREFIX}_rescued_jobs", "Stalled jobs the reaper re-published.", labels),
        abandoned=Counter(
            f"{PREFIX}_abandoned_jobs", "Stalled jobs the reaper failed (abandoned).", labels
        ),
        waits=Counter(
            f"{PREFIX}_delivery_waits",
            "Deliveries postponed without using an attempt (rate limiter, concurrency key).",
            labels,
        ),
    )


class MetricsHooks(Hooks):
    """Counts every transition of this process (see the module's docstring)."""

    def __init__(self) -> None:
        check_multiprocess_dir()
        self.counters = _counters()

    def after_transition(self, transition: Transition) -> None:
        c = self.counters
        queue, job_type = transition.queue or "", transition.job_type or ""
        event = transition.event
        c.transitions.labels(event, queue, job_type).inc()
        if event in _RUN_ENDS and transition.duration_ms is not None:
            c.durations.labels(event, queue, job_type).observe(transition.duration_ms / 1000)
        if event == "deduplicated":
            c.deduplicated.labels(queue, job_type).inc()
        elif event == "rescued":
            c.rescued.labels(queue, job_type).inc()
        elif event in _WAITS:
            c.waits.labels(queue, job_type).inc()
        if transition.details.get("error_type") == ABANDONED:
            c.abandoned.labels(queue, job_type).inc()


@dataclass(frozen=True)
class TableSnapshot:
    """What one scrape reads from the table."""

    #: (queue, status) → number of jobs
    counts: Mapping[tuple[str, str], int] = field(default_factory=dict)
    #: queue → age of its oldest pending job, in seconds
    oldest_pending_s: Mapping[str, float] = field(default_factory=dict)
    #: pending jobs whose message was never handed to the broker
    relay_backlog: int = 0
    #: processing jobs whose lease has expired
    expired_leases: int = 0
    #: the pauses in force: (scope, name)
    paused: tuple[tuple[str, str], ...] = ()
    #: the circuit breakers: (name, state, failures in the window, jobs held, times opened)
    circuits: tuple[tuple[str, str, int, int, int], ...] = ()

    @classmethod
    def from_stats(cls, stats: Mapping[str, Mapping[str, Any]], **extra: Any) -> TableSnapshot:
        """From ``Tracker.stats()``'s per-queue entries."""
        counts = {
            (queue, status): int(n)
            for queue, entry in stats.items()
            for status, n in entry.get("counts", {}).items()
        }
        oldest = {
            queue: float(entry["oldest_pending_age_s"])
            for queue, entry in stats.items()
            if entry.get("oldest_pending_age_s") is not None
        }
        return cls(counts, oldest, **extra)


def families(snapshot: TableSnapshot) -> list[Any]:
    """The gauges of one snapshot (pure: unit-tested without a database)."""
    require()
    jobs = GaugeMetricFamily(
        f"{PREFIX}_jobs", "Jobs in the table by queue and status.", labels=["queue", "status"]
    )
    for (queue, status), n in sorted(snapshot.counts.items()):
        jobs.add_metric([queue, status], n)
    oldest = GaugeMetricFamily(
        f"{PREFIX}_oldest_pending_age_seconds",
        "Age of the oldest pending job, per queue.",
        labels=["queue"],
    )
    for queue, age in sorted(snapshot.oldest_pending_s.items()):
        oldest.add_metric([queue], age)
    backlog = GaugeMetricFamily(
        f"{PREFIX}_relay_backlog", "Pending jobs whose message was never handed to the broker."
    )
    backlog.add_metric([], snapshot.relay_backlog)
    expired = GaugeMetricFamily(
        f"{PREFIX}_expired_leases", "Processing jobs whose lease has expired."
    )
    expired.add_metric([], snapshot.expired_leases)
    paused = GaugeMetricFamily(
        f"{PREFIX}_paused",
        "1 per pause in force: scope (queue, job_type, all) and name (* for all).",
        labels=["scope", "name"],
    )
    for scope, name in snapshot.paused:
        paused.add_metric([scope, name], 1)
    return [jobs, oldest, backlog, expired, paused, *_circuit_families(snapshot)]


def _circuit_families(snapshot: TableSnapshot) -> list[Any]:
    """``celery_tracked_circuit_state`` (1 for the state it is in), ``_failures``,
    ``_held`` and ``_opened`` (times opened) per circuit."""
    state = GaugeMetricFamily(
        f"{PREFIX}_circuit_state",
        "1 for each circuit's state (closed, open, half_open).",
        labels=["circuit", "state"],
    )
    failures = GaugeMetricFamily(
        f"{PREFIX}_circuit_failures", "Failures in a closed circuit's window.", labels=["circuit"]
    )
    held = GaugeMetricFamily(
        f"{PREFIX}_circuit_held", "Jobs a circuit holds in the database.", labels=["circuit"]
    )
    opened = GaugeMetricFamily(
        f"{PREFIX}_circuit_opened", "Times a circuit opened.", labels=["circuit"]
    )
    for name, now, count, holding, times in snapshot.circuits:
        state.add_metric([name, now], 1)
        failures.add_metric([name], count)
        held.add_metric([name], holding)
        opened.add_metric([name], times)
    return [state, failures, held, opened]


class TableCollector:
    """A Prometheus collector reading the table through ``read``, at most once per
    ``cache_s`` seconds (the last answer is served in between, a failure included).

    A read that fails or takes longer than ``timeout_s`` fails no scrape: the scrape gets
    ``celery_tracked_table_up 0`` without the table's gauges (the registry's counters are
    served as always), and the reason is logged. A read that hangs is never started twice:
    later scrapes wait for that one until ``timeout_s`` after it started."""

    def __init__(
        self,
        read: Callable[[], TableSnapshot],
        cache_s: float = 10.0,
        timeout_s: float = READ_TIMEOUT_S,
    ) -> None:
        self.read = read
        self.cache_s = cache_s
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._snapshot: TableSnapshot | None = None
        self._read_at: float | None = None
        self._reading: threading.Thread | None = None
        self._reading_since = 0.0
        self._answer: dict[str, TableSnapshot] = {}

    def snapshot(self) -> TableSnapshot | None:
        """The table as last read; None while it cannot be read."""
        with self._lock:
            now = time.monotonic()
            if self._read_at is None or now - self._read_at >= self.cache_s:
                self._snapshot = self._read_bounded()
                self._read_at = time.monotonic()
            return self._snapshot

    def _read_bounded(self) -> TableSnapshot | None:
        if self._reading is None or not self._reading.is_alive():
            answer: dict[str, TableSnapshot] = {}
            self._reading = threading.Thread(
                target=self._read_into, args=(answer,), name="celery-tracked-metrics-read"
            )
            self._reading.daemon = True
            self._answer = answer
            self._reading_since = time.monotonic()
            self._reading.start()
        # measured from the read's start: scrapes behind a hung read do not queue up
        self._reading.join(max(0.0, self._reading_since + self.timeout_s - time.monotonic()))
        if self._reading.is_alive():
            logger.warning(
                "metrics: the jobs table did not answer within %.1f s; served without it",
                self.timeout_s,
            )
            return None
        return self._answer.get("snapshot")

    def _read_into(self, answer: dict[str, TableSnapshot]) -> None:
        try:
            answer["snapshot"] = self.read()
        except Exception as exc:
            reason = first_line(exc, type(exc).__name__)
            logger.warning("metrics: could not read the jobs table (served without it): %s", reason)

    def collect(self) -> Iterator[Metric]:
        snapshot = self.snapshot()
        up = GaugeMetricFamily(
            f"{PREFIX}_table_up",
            "1 if the jobs table was read for this scrape, 0 if not (its gauges left out).",
        )
        up.add_metric([], 0 if snapshot is None else 1)
        yield up
        if snapshot is not None:
            yield from families(snapshot)

    def describe(self) -> list[Metric]:
        return []  # collected on demand only (no read at registration)


def registry(collector: TableCollector) -> CollectorRegistry:
    """A registry with the table's gauges and, when ``PROMETHEUS_MULTIPROC_DIR`` is set,
    the counters of every process that counted into that directory (without it, a
    separate server process has no counters to show: only the table's gauges)."""
    require()
    reg = CollectorRegistry()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.MultiProcessCollector(reg)  # type: ignore[no-untyped-call]
    reg.register(_as_collector(collector))
    return reg


def serve(reg: CollectorRegistry, port: int, addr: str = "0.0.0.0") -> Callable[[], None]:
    """Serve ``reg`` over HTTP (``/metrics``) from a daemon thread; returns ``stop``."""
    from prometheus_client import start_http_server

    server, thread = start_http_server(port, addr, registry=reg)

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    return stop


def _as_collector(collector: TableCollector) -> Collector:
    return collector  # a structural Collector


def table_reader(
    stats: Callable[[], Mapping[str, Mapping[str, Any]]],
    backlog: Callable[[], int],
    paused: Callable[[], Sequence[Any]] = tuple,
    circuits: Callable[[], Sequence[Any]] = tuple,
) -> Callable[[], TableSnapshot]:
    """What a :class:`TableCollector` reads: ``Tracker.stats()`` (its per-queue
    ``expired_leases`` summed), the store's relay ``backlog``, ``Tracker.paused()`` and
    ``Tracker.circuits()``."""

    def read() -> TableSnapshot:
        per_queue = stats()
        expired = sum(int(entry.get("expired_leases", 0)) for entry in per_queue.values())
        held = tuple((p.scope, p.name) for p in paused())
        breakers = tuple((c.name, c.state, c.failures, c.held, c.opened_count) for c in circuits())
        return TableSnapshot.from_stats(
            per_queue,
            relay_backlog=backlog(),
            expired_leases=expired,
            paused=held,
            circuits=breakers,
        )

    return read
