"""The metrics' pure parts: gauges from a snapshot, the collector's cache, the hook."""

from __future__ import annotations

from pathlib import Path

import pytest

from celery_tracked.core.hooks import Transition
from celery_tracked.services.metrics import MetricsHooks, TableCollector, TableSnapshot, families

pytest.importorskip("prometheus_client")


def _samples(snapshot: TableSnapshot) -> dict[tuple[str, tuple[str, ...]], float]:
    return {
        (s.name, tuple(s.labels.values())): s.value
        for family in families(snapshot)
        for s in family.samples
    }


def test_snapshot_from_stats_keeps_every_queue_and_status() -> None:
    stats = {
        "a": {"counts": {"pending": 2, "failed": 1}, "total": 3, "oldest_pending_age_s": 12.5},
        "b": {"counts": {"completed": 7}, "total": 7, "oldest_pending_age_s": None},
    }
    snap = TableSnapshot.from_stats(stats, relay_backlog=3, expired_leases=1)
    samples = _samples(snap)
    assert samples[("celery_tracked_jobs", ("a", "pending"))] == 2
    assert samples[("celery_tracked_jobs", ("b", "completed"))] == 7
    assert samples[("celery_tracked_oldest_pending_age_seconds", ("a",))] == 12.5
    assert ("celery_tracked_oldest_pending_age_seconds", ("b",)) not in samples
    assert samples[("celery_tracked_relay_backlog", ())] == 3
    assert samples[("celery_tracked_expired_leases", ())] == 1


def test_collector_reads_the_table_at_most_once_per_cache_period() -> None:
    reads: list[int] = []

    def read() -> TableSnapshot:
        reads.append(1)
        return TableSnapshot(relay_backlog=len(reads))

    cached = TableCollector(read, cache_s=60)
    list(cached.collect())
    list(cached.collect())
    assert len(reads) == 1
    uncached = TableCollector(read, cache_s=0)
    list(uncached.collect())
    list(uncached.collect())
    assert len(reads) == 3


def test_hook_counts_transitions_durations_and_reaper_outcomes() -> None:
    from prometheus_client import REGISTRY

    hook = MetricsHooks()
    labels = {"queue": "unit-q", "job_type": "unit-t"}

    def value(name: str, **extra: str) -> float:
        return REGISTRY.get_sample_value(name, {**extra, **labels}) or 0.0

    before = value("celery_tracked_transitions_total", event="completed")
    hook.after_transition(
        Transition("j", "completed", "completed", "m", "unit-q", "unit-t", 1, 250)
    )
    hook.after_transition(Transition("j", "rescued", "pending", "m", "unit-q", "unit-t"))
    hook.after_transition(
        Transition(
            "j", "failed", "failed", "m", "unit-q", "unit-t", details={"error_type": "abandoned"}
        )
    )
    hook.after_transition(Transition("j", "busy", "busy", "m", "unit-q", "unit-t"))
    assert value("celery_tracked_transitions_total", event="completed") == before + 1
    assert value("celery_tracked_run_duration_seconds_sum", outcome="completed") >= 0.25
    assert value("celery_tracked_rescued_jobs_total") >= 1
    assert value("celery_tracked_abandoned_jobs_total") >= 1
    assert value("celery_tracked_delivery_waits_total") >= 1


def test_the_grafana_dashboard_names_only_metrics_we_export() -> None:
    import json
    import re
    from pathlib import Path

    from prometheus_client import REGISTRY

    MetricsHooks()  # the counters exist once created
    bases = {family.name for family in REGISTRY.collect()}
    bases |= {f.name for f in families(TableSnapshot())}
    suffixes = ("", "_total", "_bucket", "_count", "_sum")
    exported = {f"{base}{suffix}" for base in bases for suffix in suffixes}
    dashboard = Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json"
    exprs = [
        target["expr"]
        for panel in json.loads(dashboard.read_text())["panels"]
        for target in panel["targets"]
    ]
    named = {name for expr in exprs for name in re.findall(r"celery_tracked_\w+", expr)}
    assert named and named <= exported, named - exported


def _names(collector: TableCollector) -> dict[str, float]:
    return {s.name: s.value for family in collector.collect() for s in family.samples}


def test_a_table_that_cannot_be_read_fails_no_scrape() -> None:
    """The database down: the scrape still answers (the workers' counters are served by
    the same registry); ``celery_tracked_table_up`` says 0, the table's gauges are left
    out, and the next read is tried after the cache period, not on every scrape."""
    from celery_tracked.core.errors import StoreError

    reads: list[int] = []

    def read() -> TableSnapshot:
        reads.append(1)
        if len(reads) == 1:
            raise StoreError("connection to postgresql://app:hunter2@db/x failed")
        return TableSnapshot(relay_backlog=5)

    collector = TableCollector(read, cache_s=60)
    down = _names(collector)
    assert down == {"celery_tracked_table_up": 0.0}
    assert _names(collector) == down and len(reads) == 1  # the failure is cached too
    collector.cache_s = 0
    up = _names(collector)
    assert up["celery_tracked_table_up"] == 1.0 and up["celery_tracked_relay_backlog"] == 5


def test_a_table_read_that_hangs_fails_no_scrape() -> None:
    """A database that does not answer (a frozen server, a network partition): the scrape
    answers within the collector's timeout, and a hung read is never started twice."""
    import threading
    import time

    release = threading.Event()
    started: list[int] = []

    def read() -> TableSnapshot:
        started.append(1)
        release.wait(10)
        return TableSnapshot(relay_backlog=1)

    collector = TableCollector(read, cache_s=0, timeout_s=1.0)
    begun = time.monotonic()
    assert _names(collector) == {"celery_tracked_table_up": 0.0}
    first = time.monotonic() - begun
    assert _names(collector) == {"celery_tracked_table_up": 0.0}  # no second wait
    assert first < 3 and time.monotonic() - begun < first + 0.5 and started == [1]
    release.set()
    for _ in range(50):  # the hung read ends; the next scrape reads afresh
        if _names(collector).get("celery_tracked_table_up") == 1.0:
            break
        time.sleep(0.05)
    assert _names(collector)["celery_tracked_relay_backlog"] == 1


def test_a_missing_multiprocess_directory_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``PROMETHEUS_MULTIPROC_DIR`` naming no directory: refused when counting is turned
    on (as the metrics server refuses it), not a traceback on every transition."""
    from celery_tracked.core.errors import ConfigurationError
    from celery_tracked.services.metrics import check_multiprocess_dir

    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path / "missing"))
    with pytest.raises(ConfigurationError, match="PROMETHEUS_MULTIPROC_DIR"):
        check_multiprocess_dir()
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    check_multiprocess_dir()
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR")
    check_multiprocess_dir()


def test_the_circuits_gauges() -> None:
    snapshot = TableSnapshot(circuits=(("stripe", "open", 5, 12, 2), ("ocr", "closed", 1, 0, 0)))
    samples = _samples(snapshot)
    assert samples["celery_tracked_circuit_state", ("stripe", "open")] == 1
    assert samples["celery_tracked_circuit_state", ("ocr", "closed")] == 1
    assert samples["celery_tracked_circuit_failures", ("stripe",)] == 5
    assert samples["celery_tracked_circuit_held", ("stripe",)] == 12
    assert samples["celery_tracked_circuit_opened", ("stripe",)] == 2
