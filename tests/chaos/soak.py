"""``make chaos``: a bounded soak under faults, then the invariants, as a table.

Everything runs on servers of its own (``servers.py``): a PostgreSQL cluster, a PgBouncer
in transaction pooling mode, a Redis guard and a Redis broker, on free ports in a
temporary directory; the shared services are never touched. Two real ``celery worker``
nodes (prefork; node ``a`` through PgBouncer, node ``b`` direct) and a ``celery beat``
(the relay and the reaper with compressed thresholds) run ``chaos_app``. While a producer
enqueues the jobs, ``faults.py`` kills pool children at random and, once per 3 minutes of
soak, kills a whole worker (restarted), crashes PostgreSQL, and restarts the Redis guard
and the broker (both without persistence: their keys and messages are lost). Then the
faults stop, the jobs drain, and ``checks.py`` judges the invariants. Exit status 1 when
one fails.

    CHAOS_MINUTES      minutes of faults (default 2); the jobs scale with it
    CHAOS_JOBS         jobs to enqueue (default 1000 a minute)
    CHAOS_SEED         the random seed (default: the time; printed, to replay a run)
    CHAOS_CONCURRENCY  pool processes per node (default 3)
    CHAOS_KEEP         1: keep the temporary directory (logs, dump) after the run
"""

from __future__ import annotations

import base64
import os
import random
import shutil
import signal
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from .faults import Fleet, Node, schedule_faults
from .servers import PgBouncer, Postgres, Redis, owned_tmpdir

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
DATABASE = "chaos"

#: Each kind of job, its weight in the mix.
KINDS = {
    "plain": 30,
    "ledger": 25,
    "flaky": 10,
    "doomed": 5,
    "secret": 10,
    "keyed_row": 10,
    "keyed_ended": 10,
}


@dataclass
class Plan:
    minutes: float
    jobs: int
    seed: int
    concurrency: int
    keep: bool

    @classmethod
    def from_env(cls) -> Plan:
        minutes = float(os.environ.get("CHAOS_MINUTES") or 2)
        jobs = int(os.environ.get("CHAOS_JOBS") or round(1000 * minutes))
        seed = int(os.environ.get("CHAOS_SEED") or time.time_ns() % 1_000_000)
        concurrency = int(os.environ.get("CHAOS_CONCURRENCY") or 3)
        keep = os.environ.get("CHAOS_KEEP", "") not in ("", "0")
        return cls(minutes, jobs, seed, concurrency, keep)

    @property
    def window_s(self) -> float:
        return self.minutes * 60

    @property
    def drain_s(self) -> float:
        """How long the jobs may take to end once the faults stopped."""
        return min(180.0, 60.0 + 5 * self.minutes)


@dataclass
class Produced:
    """What the producer did: the job ids it was given, by kind, and the keys."""

    ids: dict[str, list[str]] = field(default_factory=lambda: {k: [] for k in KINDS})
    key_of: dict[str, str] = field(default_factory=dict)  # keyed job id -> its key
    duplicates: int = 0
    duplicate_mismatch: list[str] = field(default_factory=list)
    enqueue_errors: int = 0
    given_up: list[str] = field(default_factory=list)
    reenqueued: dict[str, str] = field(default_factory=dict)  # ended job -> its key's new job
    reenqueue_refused: list[str] = field(default_factory=list)


#: This run's ``tracked_secret_key`` (a fresh Fernet key; checked absent from logs too).
SEALING_KEY = base64.urlsafe_b64encode(os.urandom(32)).decode()


def settings_environ(pg: Postgres, guard: Redis, broker: Redis) -> dict[str, str]:
    """celery-tracked's settings for the producer, the workers and Beat: the private
    servers, and the maintenance compressed so lost jobs are rescued within the soak."""
    return {
        "CHAOS_SABOTAGE": os.environ.get("CHAOS_SABOTAGE", ""),
        "CHAOS_BROKER": broker.url,
        "CHAOS_RUNS_URL": pg.url(DATABASE),
        "CELERY_TRACKED_DATABASE_URL": pg.url(DATABASE),
        "CELERY_TRACKED_DATABASE_POOLER": "none",
        "CELERY_TRACKED_REDIS_URL": guard.url,
        # sealed arguments: a secret job whose message was lost is sent again, not abandoned
        "CELERY_TRACKED_SECRET_KEY": SEALING_KEY,
        "CELERY_TRACKED_LEASE_SECONDS": "5",
        "CELERY_TRACKED_RELAY_GRACE_SECONDS": "5",
        "CELERY_TRACKED_RELAY_INTERVAL_SECONDS": "2",
        "CELERY_TRACKED_REAPER_INTERVAL_SECONDS": "2",
        "CELERY_TRACKED_REAPER_PROCESSING_SECONDS": "2",
        "CELERY_TRACKED_REAPER_PENDING_SECONDS": "10",
        "CELERY_TRACKED_REAPER_RETRYING_SECONDS": "10",
        "CELERY_TRACKED_REAPER_MAX_RESCUES": "50",
        "CELERY_TRACKED_CLEANUP_SCHEDULE": "off",
    }


def prepare_database(pg: Postgres) -> None:
    from celery_tracked.store import migrate

    admin = create_engine(pg.url("postgres"), poolclass=NullPool, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {DATABASE}"))
    admin.dispose()
    migrate.upgrade(pg.url(DATABASE))
    engine = create_engine(pg.url(DATABASE), poolclass=NullPool)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE chaos_ledger (job_id VARCHAR(36) PRIMARY KEY, n INT)"))
        conn.execute(text("CREATE TABLE chaos_runs (job_id VARCHAR(36) NOT NULL)"))
    engine.dispose()


def enqueue_one(app: Any, kind: str, n: int, secret: str, rng: random.Random) -> Any:
    """Enqueue job ``n`` of ``kind``; retried while the services are down (at most 60 s)."""
    from celery_tracked import EnqueueError

    ms = rng.randint(10, 150)
    call: dict[str, Any] = {"n": n, "ms": ms}
    if kind == "doomed":
        call = {"n": n}
    elif kind == "secret":
        call.update(password=f"{secret}-pw-{n}", chaos_secret=f"{secret}-cs-{n}")
    elif kind.startswith("keyed"):
        call = {"k": f"{kind}-{n}", "ms": ms}
    task = app.tasks[f"chaos.{kind}"]
    deadline = time.monotonic() + 60
    while True:
        try:
            return task.enqueue(**call), call.get("k")
        except EnqueueError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def produce(app: Any, plan: Plan, secret: str, fleet: Fleet, produced: Produced) -> None:
    """Enqueue ``plan.jobs`` jobs spread over 85 % of the window; each keyed ``row`` job's
    key is enqueued a second time a little later (a duplicate: the same job back)."""
    from celery_tracked import EnqueueError

    rng = random.Random(plan.seed)
    kinds = [k for k, w in KINDS.items() for _ in range(w)]
    start = time.monotonic()
    spacing = plan.window_s * 0.85 / max(plan.jobs, 1)
    keyed: list[tuple[str, str]] = []
    for n in range(plan.jobs):
        delay = start + n * spacing - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        kind = rng.choice(kinds)
        try:
            result, key = enqueue_one(app, kind, n, secret, rng)
        except EnqueueError as exc:
            produced.given_up.append(f"job {n} ({kind}): {exc}")
            continue
        produced.ids[kind].append(result.job_id)
        if key is not None:
            produced.key_of[result.job_id] = key
            if kind == "keyed_row":
                keyed.append((key, result.job_id))
        if keyed and rng.random() < 0.5:
            again_key, first_id = keyed.pop(rng.randrange(len(keyed)))
            try:
                again = app.tasks["chaos.keyed_row"].enqueue(k=again_key, ms=10)
            except EnqueueError:
                produced.enqueue_errors += 1
                continue
            produced.duplicates += 1
            if again.job_id != first_id or again.created:
                produced.duplicate_mismatch.append(
                    f"key {again_key}: first {first_id}, again {again.job_id} "
                    f"created={again.created}"
                )
    fleet.log(f"producer done: {plan.jobs} jobs in {time.monotonic() - start:.0f} s")


#: The drain goes on past its deadline while jobs keep ending (a loaded machine works
#: through a backlog slower), until nothing ended for this long, at most 3x the deadline.
PROGRESS_S = 30.0


def drain(engine: Any, timeout: float, fleet: Fleet, app: Any) -> float:
    """Wait until no job is pending, processing or retrying; seconds. Gives up after
    ``timeout`` unless a job ended in the last ``PROGRESS_S`` (never after 3 x timeout).
    Every 10 s, says how many are left; when a few are, what the workers and the queue
    say of them."""
    start = time.monotonic()
    said = 0.0
    fewest, progressed = -1, start
    while True:
        now = time.monotonic()
        if now - start >= timeout and (
            now - progressed >= PROGRESS_S or now - start >= 3 * timeout
        ):
            break
        fleet.supervise()
        try:
            left = not_ended(engine)
        except Exception as exc:  # the database just restarted: ask again
            fleet.log(f"drain: {type(exc).__name__}")
            time.sleep(1)
            continue
        if not left:
            break
        if fewest < 0 or len(left) < fewest:
            fewest, progressed = len(left), time.monotonic()
        if time.monotonic() - said >= 10:
            said = time.monotonic()
            fleet.log(f"drain: {len(left)} jobs not ended")
            if len(left) <= 5:
                fleet.log("  " + describe(app, engine, left))
        time.sleep(0.5)
    return time.monotonic() - start


def not_ended(engine: Any) -> list[str]:
    with engine.connect() as conn:
        return [
            row.id
            for row in conn.execute(
                text(
                    "SELECT id FROM background_jobs "
                    "WHERE status IN ('pending', 'processing', 'retrying')"
                )
            )
        ]


def describe(app: Any, engine: Any, ids: list[str]) -> str:
    """A few jobs not ended yet: their row, what the workers say they hold, the queue."""
    import redis

    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT id, task_name, status, attempts_made, revision, locked_until "
                "FROM background_jobs WHERE id = ANY(:ids)"
            ),
            {"ids": ids},
        ).all()
    try:
        held = app.control.inspect(timeout=2).query_task(*ids)
    except Exception as exc:
        held = repr(exc)
    client = redis.Redis.from_url(os.environ["CHAOS_BROKER"], decode_responses=True)
    try:
        queued = client.llen("chaos")
        unacked = client.hkeys("unacked")
    finally:
        client.close()
    found = [tuple(r) for r in rows]
    return f"rows {found}; workers hold {held}; queued {queued}; unacked {len(unacked)}"


def reenqueue_ended_keys(app: Any, engine: Any, produced: Produced, limit: int = 100) -> None:
    """A ``key_lifetime="ended"`` key frees when its job ended: enqueue it again, expect a
    new job (a blocked key would return the old one, or wait)."""
    ids = produced.ids["keyed_ended"][:limit]
    with engine.connect() as conn:
        ended = {
            row.id
            for row in conn.execute(
                text(
                    "SELECT id FROM background_jobs WHERE id = ANY(:ids) AND status = 'completed'"
                ),
                {"ids": ids},
            )
        }
    for job_id in ids:
        if job_id not in ended:
            continue
        key = produced.key_of[job_id]
        again = app.tasks["chaos.keyed_ended"].enqueue(k=key, ms=10)
        if not again.created or again.job_id == job_id:
            produced.reenqueue_refused.append(
                f"key {key}: got {again.job_id} created={again.created}"
            )
        else:
            produced.reenqueued[job_id] = again.job_id


def log_to(path: Path) -> None:
    """celery-tracked's and Celery's records of this process (the producer) go to a file
    (scanned for secrets with the workers' logs), not to the terminal."""
    import logging

    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)


def main() -> int:
    plan = Plan.from_env()
    secret = f"chaos{uuid.uuid4().hex[:12]}"
    root = owned_tmpdir("ct-chaos-")
    started = time.monotonic()
    pg = Postgres(root)
    guard = Redis(root, "guard")
    broker = Redis(root, "broker")
    bouncer = PgBouncer(root, pg.port)
    fleet = Fleet(root, started)
    code = 1
    try:
        fleet.log(
            f"soak: {plan.minutes:g} min of faults, {plan.jobs} jobs, seed {plan.seed}, "
            f"concurrency {plan.concurrency} x 2 nodes; files in {root}"
        )
        pg.init()
        pg.start()
        guard.start()
        broker.start()
        bouncer.start()
        prepare_database(pg)
        environ = settings_environ(pg, guard, broker)
        os.environ.update(environ)
        log_to(root / "producer.log")
        from . import chaos_app  # after the environment: it reads the broker's URL

        bounced = {
            "CELERY_TRACKED_DATABASE_URL": pg.url(DATABASE, port=bouncer.port),
            "CELERY_TRACKED_DATABASE_POOLER": "pgbouncer",
            "CHAOS_RUNS_URL": pg.url(DATABASE, port=bouncer.port),
        }
        fleet.add(Node("a", plan.concurrency, {**environ, **bounced}))
        fleet.add(Node("b", plan.concurrency, environ))
        fleet.start_all(HERE, ROOT)
        fleet.start_beat(HERE, ROOT, environ)
        produced = Produced()
        from .checks import judge  # after the environment: it reads the settings

        faults = schedule_faults(fleet, pg, guard, broker, plan.window_s, plan.seed)
        produce(chaos_app.app, plan, secret, fleet, produced)
        faults.join()
        fleet.ensure_up()
        engine = create_engine(pg.url(DATABASE), poolclass=NullPool)
        drained = drain(engine, plan.drain_s, fleet, chaos_app.app)
        reenqueue_ended_keys(chaos_app.app, engine, produced)
        drained += drain(engine, 30, fleet, chaos_app.app)
        fleet.stop_all()
        engine.dispose()
        code = judge(pg, guard, root, fleet, produced, plan, secret, drained, started)
    finally:
        fleet.stop_all()
        bouncer.stop()
        guard.stop()
        broker.stop()
        pg.stop()
        if plan.keep or code:
            print(f"chaos: files kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return code


def _stop_on_sigterm() -> None:
    """A SIGTERM (``kill``, a CI timeout, ``make`` interrupted) ends the soak through its
    ``finally``: the private servers and the workers are stopped, none left behind."""

    def stop(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


if __name__ == "__main__":
    _stop_on_sigterm()
    sys.exit(main())
