"""One phase of the benchmark: publish N jobs of one contender, then drain them.

Publish from a child process (``bench/publish.py``), then start one
``celery worker -P prefork -c 2`` and time the bodies from the first to the last one.
Server counters are read around each half (``bench/counters.py``); the worker's CPU is
read from ``/proc`` for its main process and its pool children separately.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import redis
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from bench import common, counters
from celery_tracked.store import migrate

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
CELERY = Path(sys.executable).with_name("celery")
ADMIN_URL = os.environ.get(
    "BENCH_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
TICK = os.sysconf("SC_CLK_TCK")
#: contender → the database its phases write to (None: it writes none)
DATABASES = {"plain": None, "tracked": common.DATABASE_URL, "peer": common.PEER_DATABASE_URL}


def log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        return float("nan")
    rank = max(1, min(len(sorted_values), round(q / 100 * len(sorted_values) + 0.5)))
    return sorted_values[rank - 1]


def fresh_database(url: str, *, migrations: bool = True) -> None:
    """Drop and re-create a bench database, then (by default) run the library's migrations."""
    name = make_url(url).database
    if not name or not name.replace("_", "").isalnum():
        raise SystemExit(f"refusing to recreate database {name!r}")
    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    if migrations:
        migrate.upgrade(url)


def flush_redis() -> None:
    for url in sorted({common.BROKER_URL, common.REDIS_URL}):
        client = redis.Redis.from_url(url)
        client.flushdb()
        client.close()


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(
        BENCH_BROKER_URL=common.BROKER_URL,
        BENCH_DATABASE_URL=common.DATABASE_URL,
        BENCH_REDIS_URL=common.REDIS_URL,
        BENCH_PEER_DATABASE_URL=common.PEER_DATABASE_URL,
    )
    return env


def publish(contender: str, task_name: str, jobs: int) -> dict[str, float]:
    command = [sys.executable, "-m", "bench.publish", common.APPS[contender], task_name, str(jobs)]
    done = subprocess.run(
        command, cwd=ROOT, env=child_env(), capture_output=True, text=True, check=False
    )
    if done.returncode:
        raise SystemExit(f"publisher failed ({done.returncode}):\n{done.stderr}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def start_worker(contender: str, log_level: str, logfile: Path) -> subprocess.Popen[bytes]:
    command = [str(CELERY), "-A", common.APPS[contender], "worker", "-P", "prefork", "-c", "2"]
    command += ["-n", f"bench-{contender}@%h", "-l", log_level.upper()]
    out = logfile.open("wb")
    return subprocess.Popen(
        command, cwd=ROOT, env=child_env(), stdout=out, stderr=subprocess.STDOUT
    )


def stop_worker(worker: subprocess.Popen[bytes]) -> None:
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)  # warm shutdown
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


def proc_cpu(pid: int) -> tuple[float, float]:
    """(main process, its children) CPU seconds, from ``/proc/<pid>/stat`` utime+stime."""

    def own(p: int) -> float:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / TICK

    children = 0.0
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        for child in task.read_text().split():
            children += own(int(child))
    return own(pid), children


# -- one phase ------------------------------------------------------------------------

#: contender → (table to empty before a phase, SQL counting the phase's finished rows)
ROWS = {
    "tracked": (
        "background_jobs, background_job_events",
        "SELECT count(*) FROM background_jobs WHERE status = 'completed'",
    ),
    "peer": ("celery_taskmeta", "SELECT count(*) FROM celery_taskmeta WHERE status = 'SUCCESS'"),
}


def _sql(url: str, statement: str) -> int:
    with psycopg.connect(counters.libpq(url), autocommit=True) as conn:
        cursor = conn.execute(statement)
        row = cursor.fetchone() if cursor.description else None
        return int(row[0]) if row and row[0] is not None else 0


def reset_rows(contender: str) -> None:
    url = DATABASES[contender]
    if url and contender in ROWS:
        tables = ROWS[contender][0]
        first = tables.split(",")[0]
        if _sql(url, f"SELECT count(*) FROM pg_class WHERE relname = '{first}'"):
            _sql(url, f"TRUNCATE {tables}")


def wait_rows(contender: str, jobs: int) -> int:
    """Wait until the contender's database shows every job finished (its last commit)."""
    url = DATABASES[contender]
    if not url or contender not in ROWS:
        return jobs
    finished = 0
    until = time.monotonic() + 30
    while time.monotonic() < until:
        finished = _sql(url, ROWS[contender][1])
        if finished >= jobs:
            break
        time.sleep(0.1)
    return finished


def drain(contender: str, task_name: str, jobs: int, log_level: str) -> dict[str, Any]:
    """Start a worker on the full queue; time and cost the bodies; stop it."""
    client = redis.Redis.from_url(common.REDIS_URL)
    RESULTS.mkdir(parents=True, exist_ok=True)
    logfile = RESULTS / f"worker-{contender}.log"
    worker = start_worker(contender, log_level, logfile)
    deadline = time.monotonic() + 120 + jobs / 20
    cpu_first: tuple[float, float] | None = None
    try:
        while True:
            done = int(client.get(common.counter_key(task_name)) or 0)
            if cpu_first is None and done >= 1:
                cpu_first = proc_cpu(worker.pid)
            if done >= jobs:
                break
            if worker.poll() is not None:
                raise SystemExit(f"{contender}: worker exited ({worker.returncode}), {logfile}")
            if time.monotonic() > deadline:
                raise SystemExit(f"{contender}: only {done}/{jobs} done before the deadline")
            time.sleep(0.05)
        finished = wait_rows(contender, jobs)
        cpu_last = proc_cpu(worker.pid)
    finally:
        stop_worker(worker)
    if finished != jobs:
        raise SystemExit(f"{contender}: {finished}/{jobs} rows finished in PostgreSQL")
    first = float(client.get(common.stamp_key(task_name, 1)) or "nan")
    last = float(client.get(common.stamp_key(task_name, jobs)) or "nan")
    client.close()
    base = cpu_first or (0.0, 0.0)
    return {
        "processing_s": last - first,
        "throughput": (jobs - 1) / (last - first) if last > first else float("nan"),
        "cpu_main_ms_per_job": (cpu_last[0] - base[0]) * 1000 / jobs,
        "cpu_children_ms_per_job": (cpu_last[1] - base[1]) * 1000 / jobs,
    }


def run_phase(contender: str, kind: str, jobs: int, log_level: str) -> dict[str, Any]:
    task_name = common.TASKS[(contender, kind)]
    reset_rows(contender)
    client = redis.Redis.from_url(common.REDIS_URL)
    broker = redis.Redis.from_url(common.BROKER_URL)
    client.delete(common.counter_key(task_name), *client.keys(f"bench:stamp:{task_name}:*"))
    client.set(common.target_key(task_name), jobs)
    pg_url = DATABASES[contender] or common.DATABASE_URL  # plain: the background level

    result: dict[str, Any] = {"contender": contender, "kind": kind, "jobs": jobs}
    before = counters.snapshot(client, pg_url)
    result.update(publish(contender, task_name, jobs))
    queued = int(broker.llen(common.QUEUE))
    if queued != jobs:
        raise SystemExit(f"{contender} {kind}: {queued} messages queued, expected {jobs}")
    counters.settle()
    published = counters.snapshot(client, pg_url)
    result.update(drain(contender, task_name, jobs, log_level))
    counters.settle()
    after = counters.snapshot(client, pg_url)
    result["per_enqueue"] = counters.delta(before, published, jobs)
    result["per_job"] = counters.delta(published, after, jobs)
    result["queue_left"] = int(broker.llen(common.QUEUE))
    client.close()
    broker.close()
    log(
        f"{contender} {kind}: {result['throughput']:.0f} jobs/s, enqueue p50 "
        f"{result['enqueue_p50_ms']:.2f} ms p99 {result['enqueue_p99_ms']:.2f} ms"
    )
    return result
