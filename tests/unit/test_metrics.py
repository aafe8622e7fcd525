"""The metrics' pure parts: gauges from a snapshot, the collector's cache, the hook."""

from __future__ import annotations

import pytest

from celery_tracked.hooks import Transition
from celery_tracked.metrics import MetricsHooks, TableCollector, TableSnapshot, families

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
