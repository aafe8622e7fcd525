"""Tables of the benchmark: the three contenders, their ratios per round, the cost breakdown."""

from __future__ import annotations

import statistics
from typing import Any

from bench import counters

CONTENDERS = ("plain", "tracked", "peer")
KINDS = ("noop", "sleep_10ms")
TARGETS = {"noop": 0.70, "sleep_10ms": 0.90}
NUMBERS = (
    "throughput",
    "publish_rate",
    "enqueue_p50_ms",
    "enqueue_p99_ms",
    "cpu_main_ms_per_job",
    "cpu_children_ms_per_job",
)


def median_dict(dicts: list[dict[str, float]]) -> dict[str, float]:
    keys = {k for d in dicts for k in d}
    return {k: statistics.median(d.get(k, 0.0) for d in dicts) for k in sorted(keys)}


def merge(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median over rounds of every number and of every per-job counter."""
    merged: dict[str, Any] = {k: statistics.median(r[k] for r in runs) for k in NUMBERS}
    merged["jobs"] = runs[0]["jobs"]
    merged["throughput_runs"] = [r["throughput"] for r in runs]
    for side in ("per_enqueue", "per_job"):
        merged[side] = median_dict([r[side] for r in runs])
        merged[f"{side}_summary"] = counters.summary(merged[side])
    return merged


def ratios(runs: dict[tuple[str, str], list[dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in KINDS:
        plain = runs.get(("plain", kind))
        if not plain:
            continue
        for other in ("tracked", "peer"):
            mine = runs.get((other, kind))
            if not mine:
                continue
            rounds = [m["throughput"] / p["throughput"] for p, m in zip(plain, mine, strict=True)]
            entry: dict[str, Any] = {"median": statistics.median(rounds), "rounds": rounds}
            if other == "tracked":
                entry["target"] = TARGETS[kind]
            out[f"{other}/plain {kind}"] = entry
    return out


def print_main(merged: dict[tuple[str, str], dict[str, Any]], ratio: dict[str, Any]) -> None:
    header = (
        f"{'contender':<9} {'kind':<10} {'jobs':>5} {'jobs/s':>7} {'enq p50':>8} {'enq p99':>8} "
        f"{'cpu main':>9} {'cpu pool':>9}"
    )
    print("\n" + header + "\n" + " " * 33 + "ms        ms   ms/job    ms/job\n" + "-" * len(header))
    for (contender, kind), row in merged.items():
        print(
            f"{contender:<9} {kind:<10} {row['jobs']:>5} {row['throughput']:>7.0f} "
            f"{row['enqueue_p50_ms']:>8.3f} {row['enqueue_p99_ms']:>8.3f} "
            f"{row['cpu_main_ms_per_job']:>9.3f} {row['cpu_children_ms_per_job']:>9.3f}"
        )
    print()
    for name, entry in ratio.items():
        rounds = " ".join(f"{r:.2f}" for r in entry["rounds"])
        target = f"   target >= {entry['target']:.2f}" if "target" in entry else ""
        print(f"{name:<24} {entry['median']:.3f}{target}   (per round: {rounds})")


def print_costs(merged: dict[tuple[str, str], dict[str, Any]]) -> None:
    """Per enqueue and per job: Redis commands, PG transactions, rows, HOT, WAL."""
    header = (
        f"{'contender':<9} {'kind':<10} {'side':<7} {'redis':>6} {'in B':>6} {'out B':>6} "
        f"{'pg xact':>7} {'ins':>5} {'upd':>5} {'HOT%':>5} {'wal rec':>7} {'wal B':>7} "
        f"{'syncs':>6}  redis commands"
    )
    print("\ncost per enqueue / per job (median of rounds; Redis and WAL are server-wide)")
    print(header + "\n" + "-" * len(header))
    for (contender, kind), row in merged.items():
        for side, label in (("per_enqueue_summary", "enqueue"), ("per_job_summary", "job")):
            s = row[side]
            top = ", ".join(
                f"{name} {calls:.2f}"
                for name, calls in list(s["redis_by_command"].items())[:8]
                if calls >= 0.01
            )
            print(
                f"{contender:<9} {kind:<10} {label:<7} {s['redis_commands']:>6.2f} "
                f"{s['redis_in_bytes']:>6.0f} {s['redis_out_bytes']:>6.0f} {s['pg_xacts']:>7.2f} "
                f"{s['pg_rows_inserted']:>5.2f} {s['pg_rows_updated']:>5.2f} "
                f"{s['pg_hot_pct']:>5.0f} {s['wal_records']:>7.2f} {s['wal_bytes']:>7.0f} "
                f"{s['wal_syncs']:>6.3f}  {top}"
            )
    print()
