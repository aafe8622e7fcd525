"""Fleet bench: many producers, two worker nodes, Redis and RabbitMQ brokers.

    python bench/fleet.py [--producers 8] [--jobs 400] [--workers 2] [--broker redis|amqp|both]

For each broker: fresh ``ct_bench_fleet`` database; ``--producers`` processes enqueue
``--jobs`` each at the same moment (a start time they all wait for); then two
``celery worker -P prefork -c 2`` nodes (``fleet-1@%h``, ``fleet-2@%h``) drain the queue.
One call in four carries an idempotency key drawn from a pool shared by every producer (so keys
collide across processes); the rest have none. Reported: enqueue p50/p99 over every call
of every producer, the producers' combined enqueue rate, and drain throughput (jobs
completed per second by the two nodes together, from the first ``started_at`` to the last
``finished_at``).

Checked (a failure exits non-zero): one row per key; every call's job id exists and every
row is ``completed`` with one attempt and exactly one ``completed`` event; every body ran
exactly once (the body counts its runs per job in Redis). Not a test: see bench/README.md.

**Drops and re-creates ``FLEET_DATABASE_URL``'s database (``ct_bench_fleet``), flushes
``FLEET_REDIS_URL``'s Redis database and purges the RabbitMQ queue ``fleet``.** Brokers:
``FLEET_REDIS_BROKER_URL``, ``FLEET_AMQP_BROKER_URL``. Unless both Redis variables are set
(to one URL: then it is yours to flush), the bench starts a Redis of its own
(``bench/own_redis.py``).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402
from sqlalchemy import create_engine, text  # noqa: E402

from bench.contenders import fresh_database  # noqa: E402
from bench.own_redis import own_redis  # noqa: E402

CELERY = Path(sys.executable).with_name("celery")
BROKERS = {
    "redis": own_redis("FLEET_REDIS_BROKER_URL", "FLEET_REDIS_URL"),
    "amqp": os.environ.get("FLEET_AMQP_BROKER_URL", "amqp://guest:guest@127.0.0.1:5672//"),
}
DATABASE_URL = os.environ.get(
    "FLEET_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/ct_bench_fleet"
)
REDIS_URL = own_redis("FLEET_REDIS_BROKER_URL", "FLEET_REDIS_URL")
KEYED_SHARE = 0.25


def log(message: str) -> None:
    print(f"[fleet] {message}", file=sys.stderr, flush=True)


def environment(broker: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(FLEET_BROKER_URL=broker, FLEET_DATABASE_URL=DATABASE_URL, FLEET_REDIS_URL=REDIS_URL)
    return env


def start_workers(broker: str, count: int) -> list[subprocess.Popen[bytes]]:
    logs = ROOT / "bench" / "results"
    logs.mkdir(parents=True, exist_ok=True)
    workers = []
    for i in range(1, count + 1):
        command = [str(CELERY), "-A", "bench.fleet_app", "worker", "-P", "prefork", "-c", "2"]
        command += ["-Q", "fleet", "-n", f"fleet-{i}@%h", "-l", "info"]
        out = (logs / f"fleet-worker-{i}.log").open("wb")
        workers.append(
            subprocess.Popen(
                command, cwd=ROOT, env=environment(broker), stdout=out, stderr=subprocess.STDOUT
            )
        )
    return workers


def stop(workers: list[subprocess.Popen[bytes]]) -> None:
    for worker in workers:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
    for worker in workers:
        try:
            worker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


def produce(broker: str, index: int, jobs: int, keys: int, start_at: float, out: Any) -> None:
    """One producer process: wait for the common start, enqueue ``jobs``, report."""
    os.environ.update(environment(broker))
    from bench.fleet_app import work

    chance = random.Random(index)
    made = [(None, work.enqueue(-1).job_id)]  # connects outside the timing
    while time.time() < start_at:
        time.sleep(0.001)
    took = []
    for n in range(jobs):
        key = f"k-{chance.randrange(keys)}" if chance.random() < KEYED_SHARE else None
        started = time.perf_counter()
        result = work.with_options(idempotency_key=key)(n) if key else work.enqueue(n)
        took.append(time.perf_counter() - started)
        made.append((key, result.job_id))
    out.put({"index": index, "took": took, "made": made, "ended": time.time()})


def check(made: list[tuple[str | None, str]], rows: list[Any], runs: dict[str, int]) -> list[str]:
    """What broke, if anything."""
    problems = []
    by_id = {row.id: row for row in rows}
    per_key: dict[str, set[str]] = {}
    for key, job_id in made:
        if job_id not in by_id:
            problems.append(f"job {job_id} has no row")
        if key is not None:
            per_key.setdefault(key, set()).add(job_id)
    problems += [f"key {k} has {len(v)} jobs" for k, v in per_key.items() if len(v) != 1]
    for row in rows:
        if (row.status, row.attempts_made, row.completed_events) != ("completed", 1, 1):
            problems.append(
                f"job {row.id}: {row.status}, {row.attempts_made} attempts, "
                f"{row.completed_events} completed events"
            )
        if runs.get(row.id, 0) != 1:
            problems.append(f"job {row.id}: body ran {runs.get(row.id, 0)} times")
    return problems


def read_rows() -> list[Any]:
    engine = create_engine(DATABASE_URL)
    try:
        with engine.connect() as conn:
            return list(
                conn.execute(
                    text(
                        "SELECT j.id, j.status, j.attempts_made, j.started_at, j.finished_at, "
                        "(SELECT count(*) FROM background_job_events e WHERE e.job_id = j.id "
                        "AND e.event = 'completed') AS completed_events FROM background_jobs j"
                    )
                )
            )
    finally:
        engine.dispose()


def wait_drained(expected: int, deadline_s: float) -> list[Any]:
    until = time.monotonic() + deadline_s
    rows = read_rows()
    while time.monotonic() < until:
        if len(rows) >= expected and all(r.status == "completed" for r in rows):
            break
        time.sleep(1)
        rows = read_rows()
    return rows


def one_broker(name: str, producers: int, jobs: int, workers: int) -> dict[str, Any]:
    broker = BROKERS[name]
    fresh_database(DATABASE_URL)
    client = redis.Redis.from_url(REDIS_URL)
    client.flushdb()
    if name == "amqp":
        subprocess.run(
            [str(CELERY), "-A", "bench.fleet_app", "purge", "-f", "-Q", "fleet"],
            cwd=ROOT,
            env=environment(broker),
            check=False,
            capture_output=True,
        )
    out: Any = multiprocessing.get_context("spawn").Queue()
    start_at = time.time() + 8  # spawned producers import the app meanwhile
    keys = max(1, producers * jobs // 10)
    procs = [
        multiprocessing.get_context("spawn").Process(
            target=produce, args=(broker, i, jobs, keys, start_at, out)
        )
        for i in range(producers)
    ]
    for proc in procs:
        proc.start()
    reports = [out.get(timeout=600) for _ in procs]
    for proc in procs:
        proc.join()
    made = [m for r in reports for m in r["made"]]
    expected = len({job_id for _, job_id in made})
    nodes = start_workers(broker, workers)  # the queue is full: the drain is timed alone
    try:
        rows = wait_drained(expected, 600)
    finally:
        stop(nodes)
    runs = {k.decode(): int(v) for k, v in client.hgetall("fleet:runs").items()}
    took = sorted(t for r in reports for t in r["took"])
    calls = len(took)
    produced_s = max(r["ended"] for r in reports) - start_at
    first = min(r.started_at for r in rows)
    last = max(r.finished_at for r in rows)
    problems = check(made, rows, runs)
    return {
        "broker": name,
        "calls": calls,
        "jobs": len(rows),
        "enqueue_p50_ms": took[calls // 2] * 1000,
        "enqueue_p99_ms": took[min(calls - 1, int(calls * 0.99))] * 1000,
        "enqueue_rate": calls / produced_s,
        "drain_rate": len(rows) / (last - first).total_seconds(),
        "problems": problems,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--producers", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=400, help="enqueue calls per producer")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--broker", choices=("redis", "amqp", "both"), default="both")
    options = parser.parse_args()
    names = ["redis", "amqp"] if options.broker == "both" else [options.broker]
    results = [one_broker(n, options.producers, options.jobs, options.workers) for n in names]
    print(
        f"{options.producers} producers x {options.jobs} calls ({KEYED_SHARE:.0%} with a shared "
        f"key), {options.workers} worker nodes (prefork -c 2)"
    )
    print(
        f"{'broker':<7} {'calls':>6} {'jobs':>6} {'enq p50':>8} {'enq p99':>8} "
        f"{'enq/s':>7} {'drain/s':>8}  checks"
    )
    for r in results:
        verdict = (
            "ok: one row per key, every job completed once"
            if not r["problems"]
            else (f"{len(r['problems'])} PROBLEMS: " + "; ".join(r["problems"][:5]))
        )
        print(
            f"{r['broker']:<7} {r['calls']:>6} {r['jobs']:>6} {r['enqueue_p50_ms']:>6.2f}ms "
            f"{r['enqueue_p99_ms']:>6.2f}ms {r['enqueue_rate']:>7.0f} {r['drain_rate']:>8.0f}  "
            f"{verdict}"
        )
    if any(r["problems"] for r in results):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
