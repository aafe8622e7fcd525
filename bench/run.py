"""Throughput benchmark: plain Celery tasks against their tracked twins.

    python bench/run.py [--jobs 5000] [--sleep-jobs 1000] [--repeat 1]

For each of plain no-op, tracked no-op, plain 10 ms, tracked 10 ms: publish all jobs
first (timing every ``apply_async`` call), then start one
``celery worker -P prefork -c 2`` on that task's queue and time the processing from the
first body to the last one (timestamps written by the bodies themselves, so worker boot
is not measured). Tracked runs are then checked: every row must be ``completed``.

Prints a table and writes ``bench/results/latest.json``. See ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import signal
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402
from sqlalchemy import create_engine, text  # noqa: E402
from sqlalchemy.engine import make_url  # noqa: E402

from bench import app as bench  # noqa: E402
from celery_tracked.store import migrate  # noqa: E402

RESULTS = ROOT / "bench" / "results"
CELERY = Path(sys.executable).with_name("celery")
ADMIN_URL = os.environ.get(
    "BENCH_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
TARGETS = {"noop": 0.70, "sleep_10ms": 0.95}

#: (label, task name, kind, tracked)
PHASES = [
    ("plain no-op", bench.PLAIN_NOOP, "noop", False),
    ("tracked no-op", bench.TRACKED_NOOP, "noop", True),
    ("plain 10 ms", bench.PLAIN_SLEEP, "sleep_10ms", False),
    ("tracked 10 ms", bench.TRACKED_SLEEP, "sleep_10ms", True),
]


def log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


# -- set-up ---------------------------------------------------------------------------


def fresh_database(url: str) -> None:
    """Drop and re-create the bench database, then run the library's migrations."""
    name = make_url(url).database
    if not name or not name.replace("_", "").isalnum():
        raise SystemExit(f"refusing to recreate database {name!r}")
    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    migrate.upgrade(url)


def flush_redis() -> None:
    for url in sorted({bench.BROKER_URL, bench.REDIS_URL}):
        client = redis.Redis.from_url(url)
        client.flushdb()
        client.close()


# -- one phase ------------------------------------------------------------------------


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        return float("nan")
    rank = max(1, min(len(sorted_values), round(q / 100 * len(sorted_values) + 0.5)))
    return sorted_values[rank - 1]


def publish(task: Any, jobs: int) -> dict[str, float]:
    latencies: list[float] = []
    clock = time.perf_counter
    started = clock()
    for _ in range(jobs):
        t0 = clock()
        task.apply_async()
        latencies.append(clock() - t0)
    elapsed = clock() - started
    latencies.sort()
    return {
        "publish_s": elapsed,
        "publish_rate": jobs / elapsed,
        "enqueue_p50_ms": percentile(latencies, 50) * 1000,
        "enqueue_p99_ms": percentile(latencies, 99) * 1000,
        "enqueue_mean_ms": statistics.fmean(latencies) * 1000,
    }


def start_worker(queue: str, logfile: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(
        BENCH_BROKER_URL=bench.BROKER_URL,
        BENCH_DATABASE_URL=bench.DATABASE_URL,
        BENCH_REDIS_URL=bench.REDIS_URL,
    )
    command = [
        str(CELERY),
        "-A",
        "bench.app",
        "worker",
        "-P",
        "prefork",
        "-c",
        "2",
        "-Q",
        queue,
        "-n",
        f"bench-{queue}@%h",
        "--without-mingle",
        "--without-gossip",
        "--without-heartbeat",
        "-l",
        "warning",
    ]
    out = logfile.open("wb")
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def stop_worker(worker: subprocess.Popen[bytes]) -> None:
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)  # warm shutdown
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


def count_completed(task_name: str) -> int:
    engine = create_engine(bench.DATABASE_URL)
    try:
        with engine.connect() as conn:
            return int(
                conn.execute(
                    text(
                        "SELECT count(*) FROM background_jobs "
                        "WHERE task_name = :name AND status = 'completed'"
                    ),
                    {"name": task_name},
                ).scalar_one()
            )
    finally:
        engine.dispose()


def clear_rows() -> None:
    """Every tracked phase starts from empty tables (repeats must not see earlier rows)."""
    engine = create_engine(bench.DATABASE_URL)
    try:
        with engine.begin() as conn:
            conn.execute(text("TRUNCATE background_jobs, background_job_events"))
    finally:
        engine.dispose()


def run_phase(label: str, task_name: str, tracked: bool, jobs: int) -> dict[str, Any]:
    if tracked:
        clear_rows()
    task = bench.app.tasks[task_name]
    queue = bench.QUEUES[task_name]
    client = redis.Redis.from_url(bench.REDIS_URL)
    broker = redis.Redis.from_url(bench.BROKER_URL)
    client.delete(bench.counter_key(task_name), *client.keys(f"bench:stamp:{task_name}:*"))
    client.set(bench.target_key(task_name), jobs)

    log(f"{label}: publishing {jobs} jobs to {queue}")
    result: dict[str, Any] = {"label": label, "task": task_name, "jobs": jobs}
    result.update(publish(task, jobs))
    queued = int(broker.llen(queue))
    if queued != jobs:
        raise SystemExit(f"{label}: {queued} messages queued, expected {jobs}")

    RESULTS.mkdir(parents=True, exist_ok=True)
    logfile = RESULTS / f"worker-{queue}.log"
    usage_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    spawned = time.time()
    worker = start_worker(queue, logfile)
    deadline = time.monotonic() + 120 + jobs / 20
    try:
        while True:
            done = int(client.get(bench.counter_key(task_name)) or 0)
            if done >= jobs:
                break
            if worker.poll() is not None:
                raise SystemExit(f"{label}: worker exited ({worker.returncode}), see {logfile}")
            if time.monotonic() > deadline:
                raise SystemExit(f"{label}: only {done}/{jobs} done before the deadline")
            time.sleep(0.1)
        if tracked:
            # the last body ran; its completion commit follows right after
            completed = 0
            until = time.monotonic() + 30
            while time.monotonic() < until:
                completed = count_completed(task_name)
                if completed >= jobs:
                    break
                time.sleep(0.1)
            result["completed_rows"] = completed
            if completed != jobs:
                raise SystemExit(f"{label}: {completed}/{jobs} rows completed in PostgreSQL")
        left = int(broker.llen(queue))
    finally:
        stop_worker(worker)
    usage_after = resource.getrusage(resource.RUSAGE_CHILDREN)

    first = float(client.get(bench.stamp_key(task_name, 1)) or "nan")
    last = float(client.get(bench.stamp_key(task_name, jobs)) or "nan")
    processing = last - first
    cpu = (usage_after.ru_utime - usage_before.ru_utime) + (
        usage_after.ru_stime - usage_before.ru_stime
    )
    result.update(
        {
            "processing_s": processing,
            "throughput": (jobs - 1) / processing if processing > 0 else float("nan"),
            "boot_to_first_s": first - spawned,
            "queue_left": left,
            "worker_cpu_s": cpu,
        }
    )
    client.close()
    broker.close()
    log(
        f"{label}: {result['throughput']:.0f} jobs/s "
        f"(enqueue p50 {result['enqueue_p50_ms']:.2f} ms, p99 {result['enqueue_p99_ms']:.2f} ms)"
    )
    return result


# -- report ---------------------------------------------------------------------------


def merge(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median over repeats of every numeric field."""
    merged = dict(runs[-1])
    for key, value in runs[-1].items():
        if isinstance(value, float):
            merged[key] = statistics.median(r[key] for r in runs)
    merged["repeats"] = len(runs)
    if len(runs) > 1:
        merged["throughput_runs"] = [r["throughput"] for r in runs]
    return merged


def report(
    results: dict[str, dict[str, Any]],
    runs: dict[str, list[dict[str, Any]]],
    args: argparse.Namespace,
) -> dict[str, Any]:
    """The ratio is the median of the per-repeat ratios: each repeat runs plain then tracked
    back to back, so a slow spell of a shared machine hits both sides of one pair."""
    ratios = {}
    for kind, plain, tracked in (
        ("noop", "plain no-op", "tracked no-op"),
        ("sleep_10ms", "plain 10 ms", "tracked 10 ms"),
    ):
        if plain in results and tracked in results:
            pairs = [
                t["throughput"] / p["throughput"]
                for p, t in zip(runs[plain], runs[tracked], strict=True)
            ]
            ratio = statistics.median(pairs)
            ratios[kind] = {
                "ratio": ratio,
                "pairs": pairs,
                "target": TARGETS[kind],
                "ok": ratio >= TARGETS[kind],
            }

    header = (
        f"{'workload':<15} {'jobs':>6} {'jobs/s':>8} {'publish/s':>10} "
        f"{'enq p50 ms':>11} {'enq p99 ms':>11} {'cpu ms/job':>11}"
    )
    print()
    print(header)
    print("-" * len(header))
    for label, row in results.items():
        print(
            f"{label:<15} {row['jobs']:>6} {row['throughput']:>8.0f} {row['publish_rate']:>10.0f} "
            f"{row['enqueue_p50_ms']:>11.3f} {row['enqueue_p99_ms']:>11.3f} "
            f"{row['worker_cpu_s'] / row['jobs'] * 1000:>11.3f}"
        )
    print()
    for kind, entry in ratios.items():
        verdict = "OK" if entry["ok"] else "BELOW TARGET"
        pairs = " ".join(f"{r:.2f}" for r in entry["pairs"])
        print(
            f"tracked/plain {kind:<11} {entry['ratio']:.3f}   target >= {entry['target']:.2f}   "
            f"{verdict}   (per repeat: {pairs})"
        )
    print()
    return {
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "args": {"jobs": args.jobs, "sleep_jobs": args.sleep_jobs, "repeat": args.repeat},
        "method": "publish all jobs, then start the worker; throughput = (N-1) / "
        "(time of last body - time of first body)",
        "results": results,
        "ratios": ratios,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000, help="no-op jobs per workload")
    parser.add_argument("--sleep-jobs", type=int, default=1000, help="10 ms jobs per workload")
    parser.add_argument("--repeat", type=int, default=1, help="runs per workload (median)")
    parser.add_argument(
        "--only", choices=["noop", "sleep_10ms"], help="run only the no-op or the 10 ms pair"
    )
    parser.add_argument("--output", type=Path, default=RESULTS / "latest.json")
    args = parser.parse_args()
    if args.jobs < 2 or args.sleep_jobs < 2 or args.repeat < 1:
        parser.error("--jobs and --sleep-jobs must be >= 2, --repeat >= 1")

    log(f"fresh database {make_url(bench.DATABASE_URL).database}, migrations, flush Redis")
    fresh_database(bench.DATABASE_URL)
    flush_redis()

    runs: dict[str, list[dict[str, Any]]] = {}
    for _ in range(args.repeat):
        for label, task_name, kind, tracked in PHASES:
            if args.only and kind != args.only:
                continue
            jobs = args.jobs if kind == "noop" else args.sleep_jobs
            runs.setdefault(label, []).append(run_phase(label, task_name, tracked, jobs))
    results = {label: merge(r) for label, r in runs.items()}
    document = report(results, runs, args)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(document, indent=2) + "\n")
    log(f"wrote {args.output}")


if __name__ == "__main__":
    main()
