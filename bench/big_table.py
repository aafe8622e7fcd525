"""Flat at scale: the same measurements on a small table and on a 10,000,000-row one.

    python bench/big_table.py [--rows 10000000] [--small-rows 20000] [--reuse] [--jobs 2000]

Two PostgreSQL databases, both dropped, re-created and migrated with the library's
migrations, then filled in SQL by ``bench/big_fill.py`` (same generator, same mix):
``ct_bench_scale_small`` with ``--small-rows`` rows (the baseline: near-empty, but every
measurement has rows to act on) and ``ct_bench_scale`` with ``--rows`` rows (``--reuse``:
keep a filled ``ct_bench_scale`` as it is). Before measuring, the active rows (pending,
processing, retrying) are made recent (leases and retry times 10 minutes ahead), so the
reaper finds nothing to do and measures only its reads.

Then, on each database, in a process of its own with the same code (``--measure URL``),
through the library's public API on ``bench/app.py``'s app (``tracked_database_url`` on
that database; broker and tracking Redis: a Redis database of its own, see
:func:`_own_redis_db`):

- ``get_job``: 1,000 calls on random existing ids;
- ``Tracker.jobs`` first page (50): no filter, ``status=failed``, ``queue=queue_3``,
  ``owner_id=user_123`` (median of 20 calls each);
- ``Tracker.stats()`` (median of 5), and the same with the exact ``GROUP BY`` of every
  row that it ran before (median of 3);
- enqueue: ``--jobs`` ``bench.tracked_noop`` ``apply_async`` calls (the real path: Redis
  guard, row ``INSERT``, publish, handed-over mark), p50 and p99, while no worker listens;
- drain: then one ``celery worker -P prefork -c 2`` drains them; throughput from the first
  to the last body's timestamp (as ``bench/run.py``); all rows checked ``completed``;
- one cleanup batch: the cleanup service's batch (``purge_batch`` of the ``completed``
  sweep at the default 7-day retention, 5,000 rows, then the guard release), median of 3;
- one reaper pass: ``Tracker.reap()``, median of 3.

``--repeat`` rounds (default 3; the small database is re-created for each, the big one
only freshened), each measuring small then big. Prints the medians (small, big,
big/small) and writes ``bench/results/scale-latest.json``.
Flushes the Redis database it holds. See ``bench/README.md``, "Flat at scale".
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sqlalchemy import create_engine, text  # noqa: E402

from bench.own_redis import own_redis  # noqa: E402

RESULTS = ROOT / "bench" / "results"
BASE_URL = os.environ.get(
    "BENCH_SCALE_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432"
)
ADMIN_URL = os.environ.get(
    "BENCH_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
BIG, SMALL = "ct_bench_scale", "ct_bench_scale_small"
FRESHEN = """
UPDATE background_jobs SET
    created_at = now() - (abs(hashtext(id)) % 300) * interval '1 s',
    updated_at = now(), published_at = now(),
    locked_until = CASE WHEN status = 'processing' THEN now() + interval '10 minutes' END,
    not_before = CASE WHEN status = 'retrying' THEN now() + interval '10 minutes' END
WHERE status IN ('pending', 'processing', 'retrying')
"""


def log(message: str) -> None:
    print(f"[bench-scale] {message}", file=sys.stderr, flush=True)


def url_of(name: str) -> str:
    return f"{BASE_URL}/{name}"


def prepare(name: str, rows: int, events_per_job: int, reuse: bool) -> dict[str, Any]:
    """Create, migrate and fill ``name`` (unless ``reuse`` and it holds rows)."""
    from bench.big_fill import fill
    from celery_tracked.store import migrate

    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        exists = conn.execute(
            text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}
        ).first()
        if exists and not reuse:
            conn.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
        if not exists or not reuse:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    url = url_of(name)
    migrate.upgrade(url)
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    info: dict[str, Any] = {"database": name}
    with engine.connect() as conn:
        if not conn.execute(text("SELECT EXISTS (SELECT 1 FROM background_jobs)")).scalar():
            started = time.monotonic()
            log(f"{name}: filling {rows:,} rows ({events_per_job} events each)")
            info["fill_phases_s"] = fill(conn, rows, events_per_job, log)
            info["fill_s"] = time.monotonic() - started
            log(f"{name}: filled in {info['fill_s']:.0f} s")
        conn.execute(text(FRESHEN))
        info["rows"] = conn.execute(
            text("SELECT reltuples::bigint FROM pg_class WHERE relname = 'background_jobs'")
        ).scalar()
        info["size"] = conn.execute(
            text("SELECT pg_size_pretty(pg_database_size(current_database()))")
        ).scalar()
    engine.dispose()
    return info


# -- measuring (in a process of its own: bench.app reads its database from the env) --------


def _median_ms(call: Callable[[], Any], times: int) -> float:
    spent = []
    for _ in range(times):
        started = time.perf_counter()
        call()
        spent.append(time.perf_counter() - started)
    return statistics.median(spent) * 1000


def _reads(tracker: Any, rows: int) -> dict[str, float]:
    from bench.run import percentile

    # the oldest rows are the cleanup's: a --reuse run may have removed some
    ids = [_job_id(random.randint(1, rows * 9 // 10)) for _ in range(1000)]
    spent = []
    for job_id in ids:
        started = time.perf_counter()
        assert tracker.get_job(job_id) is not None, job_id
        spent.append(time.perf_counter() - started)
    spent.sort()
    out = {
        "get_job p50 ms": percentile(spent, 50) * 1000,
        "get_job p99 ms": percentile(spent, 99) * 1000,
    }
    for label, filters in (
        ("jobs() no filter ms", {}),
        ("jobs(status=failed) ms", {"status": "failed"}),
        ("jobs(queue=queue_3) ms", {"queue": "queue_3"}),
        ("jobs(owner_id=user_123) ms", {"owner_id": "user_123"}),
    ):
        out[label] = _median_ms(lambda f=filters: tracker.jobs(limit=50, **f), 20)  # type: ignore[misc]
    out["stats() ms"] = _median_ms(tracker.stats, 5)
    from celery_tracked.store import reads

    exact_above, reads.ESTIMATE_ABOVE = reads.ESTIMATE_ABOVE, 1 << 62
    try:  # the exact GROUP BY of every row (what stats() did before 0.x)
        out["stats() exact ms"] = _median_ms(tracker.stats, 3)
    finally:
        reads.ESTIMATE_ABOVE = exact_above
    return out


def _job_id(i: int) -> str:
    """The generator's id of row ``i`` (``md5(i)`` as a uuid)."""
    import hashlib
    import uuid

    return str(uuid.UUID(hashlib.md5(str(i).encode()).hexdigest()))


def _upkeep(tracker: Any) -> dict[str, float]:
    from celery_tracked.core.cleanup import Sweep
    from celery_tracked.core.jobs import PURGE_START

    settings = tracker.settings
    cleanup = tracker._services.maintenance["cleanup"]  # the wiring's plugin (services/cleanup.py)
    sweep = Sweep("completed", datetime.now(timezone.utc) - timedelta(days=7))
    cursor: Any = PURGE_START
    spent, removed = [], 0
    for _ in range(3):
        started = time.perf_counter()
        batch = tracker._services.store.purge_batch(sweep, cursor, settings.cleanup_batch_size)
        cleanup._release(batch.removed)
        spent.append(time.perf_counter() - started)
        cursor, removed = batch.cursor, removed + len(batch.removed)
    moves = sum(len(v) for v in tracker.reap().as_dict().values())
    return {
        "cleanup batch ms": statistics.median(spent) * 1000,
        "cleanup rows/batch": removed / 3,
        "reaper pass ms": _median_ms(tracker.reap, 3),
        "reaper moves": float(moves),
    }


def _completed(task_name: str) -> int:
    """This bench's completed jobs (the fill's rows have other task names)."""
    from bench import common

    engine = create_engine(common.DATABASE_URL)
    try:
        with engine.connect() as conn:
            query = (
                "SELECT count(*) FROM background_jobs WHERE task_name = :n AND status = 'completed'"
            )
            return int(conn.execute(text(query), {"n": task_name}).scalar_one())
    finally:
        engine.dispose()


def _enqueue_drain(jobs: int) -> dict[str, float]:
    """The real ``apply_async`` path from a publisher process, then one worker drains (as
    ``bench/run.py``'s tracked contender; never its ``reset_rows``: the table stays)."""
    import redis

    from bench import common, contenders

    name = common.TASKS[("tracked", "noop")]
    client = redis.Redis.from_url(common.REDIS_URL)
    client.flushdb()
    client.set(common.target_key(name), jobs)
    before = _completed(name)
    enqueue = contenders.publish("tracked", name, jobs)
    RESULTS.mkdir(parents=True, exist_ok=True)
    worker = contenders.start_worker("tracked", "WARNING", RESULTS / "worker-scale.log")
    deadline = time.monotonic() + 120 + jobs / 20
    try:
        while int(client.get(common.counter_key(name)) or 0) < jobs:
            if worker.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("drain: the worker exited or the deadline passed")
            time.sleep(0.1)
        until = time.monotonic() + 30
        while _completed(name) - before < jobs and time.monotonic() < until:
            time.sleep(0.1)
        completed = _completed(name) - before
    finally:
        contenders.stop_worker(worker)
    first = float(client.get(common.stamp_key(name, 1)) or "nan")
    last = float(client.get(common.stamp_key(name, jobs)) or "nan")
    client.close()
    if completed != jobs:
        raise SystemExit(f"drain: {completed}/{jobs} rows completed")
    return {
        "enqueue p50 ms": enqueue["enqueue_p50_ms"],
        "enqueue p99 ms": enqueue["enqueue_p99_ms"],
        "drain jobs/s": (jobs - 1) / (last - first),
    }


def measure(name: str, rows: int, jobs: int) -> dict[str, float]:
    """Every measurement on database ``name``, in this process (see the module doc)."""
    os.environ["BENCH_DATABASE_URL"] = url_of(name)
    from bench import app as bench
    from celery_tracked import Tracker

    tracker = Tracker.for_app(bench.app)
    try:
        out = _reads(tracker, rows)
        out.update(_enqueue_drain(jobs))
        out.update(_upkeep(tracker))
    finally:
        tracker.close()
    return out


def measured(name: str, rows: int, jobs: int) -> dict[str, float]:
    """:func:`measure` in a child process (a fresh app bound to ``name``)."""
    command = [sys.executable, __file__, "--measure", name, "--rows", str(rows)]
    command += ["--jobs", str(jobs)]
    done = subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.PIPE)
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def _own_redis_db() -> None:
    """Broker and tracking Redis: ``BENCH_SCALE_REDIS_URL`` when given (yours to flush),
    else a ``redis-server`` of this bench's own (``bench/own_redis.py``)."""
    chosen = os.environ.get("BENCH_SCALE_REDIS_URL")
    if chosen:
        os.environ["BENCH_BROKER_URL"] = os.environ["BENCH_REDIS_URL"] = chosen
    log(f"broker and tracking Redis: {own_redis('BENCH_BROKER_URL', 'BENCH_REDIS_URL')}")


def table(small: dict[str, float], big: dict[str, float], rows: tuple[int, int]) -> str:
    lines = [
        f"| measurement | {rows[0]:,} rows | {rows[1]:,} rows | ratio |",
        "|---|---|---|---|",
    ]
    for key, value in small.items():
        other = big.get(key, float("nan"))
        ratio = other / value if value else float("nan")
        lines.append(f"| {key} | {value:.2f} | {other:.2f} | {ratio:.2f} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--small-rows", type=int, default=20_000)
    parser.add_argument("--events-per-job", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=2000, help="jobs enqueued and drained")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (medians reported)")
    parser.add_argument("--reuse", action="store_true", help="keep a filled ct_bench_scale")
    parser.add_argument("--measure", metavar="DATABASE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.rows, args.jobs)))
        return 0
    _own_redis_db()
    started = time.monotonic()
    infos = [{}, prepare(BIG, args.rows, args.events_per_job, reuse=args.reuse)]
    rounds: list[list[dict[str, float]]] = [[], []]
    for n in range(args.repeat):
        log(f"round {n + 1} of {args.repeat}")
        # the small table afresh each round: the cleanup batches remove most of it
        infos[0] = prepare(SMALL, args.small_rows, args.events_per_job, reuse=False)
        if n:
            prepare(BIG, args.rows, args.events_per_job, reuse=True)  # freshen
        for info, done in zip(infos, rounds, strict=True):
            done.append(measured(info["database"], int(info["rows"]), args.jobs))
    results = [{key: statistics.median(r[key] for r in done) for key in done[0]} for done in rounds]
    text_table = table(results[0], results[1], (args.small_rows, int(infos[1]["rows"])))
    print(text_table)
    total = time.monotonic() - started
    print(f"\nend to end {total:.0f} s; {BIG}: {infos[1]['size']}, fill {infos[1].get('fill_s')}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "scale-latest.json").write_text(
        json.dumps(
            {
                "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "databases": infos,
                "small": results[0],
                "big": results[1],
                "rounds": rounds,
                "total_s": total,
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
