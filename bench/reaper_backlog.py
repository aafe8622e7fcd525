"""A backlog behind a global rate limit and a full concurrency key, with real workers and
Beat at the reaper's DEFAULT thresholds (issue 22, item 0): no job waiting its turn may be
rescued or abandoned, and every job must complete once.

    python bench/reaper_backlog.py --limited 84 --keyed 56 --minutes 16

Uses its own PostgreSQL database (created and dropped) and a Redis of its own (a private
``redis-server``, ``bench/own_redis.py``); prints one JSON line with the counts.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import redis
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))

from bench.own_redis import own_redis  # noqa: E402

CELERY = str(Path(sys.executable).parent / "celery")
PG_ADMIN = os.environ.get("SOAK_PG_ADMIN", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")


def counts(url: str) -> dict[str, int]:
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            statuses = dict(
                conn.execute(
                    text("SELECT status, count(*) FROM background_jobs GROUP BY status")
                ).all()
            )
            events = dict(
                conn.execute(
                    text("SELECT event, count(*) FROM background_job_events GROUP BY event")
                ).all()
            )
            abandoned = conn.execute(
                text("SELECT count(*) FROM background_jobs WHERE error_type = 'abandoned'")
            ).scalar_one()
    finally:
        engine.dispose()
    return {
        **{f"status_{k}": v for k, v in statuses.items()},
        **{f"events_{k}": v for k, v in events.items()},
        "abandoned": abandoned,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--limited", type=int, default=84)
    parser.add_argument("--keyed", type=int, default=56)
    parser.add_argument("--minutes", type=float, default=16)
    parser.add_argument("--workers", type=int, default=2)
    opts = parser.parse_args()
    broker = own_redis("SOAK_BROKER", database=0)
    client = redis.Redis.from_url(broker)
    client.flushdb()
    name = f"ct_soak_{uuid.uuid4().hex[:8]}"
    admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(PG_ADMIN).set(database=name).render_as_string(hide_password=False)
    environ = {k: v for k, v in os.environ.items() if not k.startswith("CELERY_TRACKED_")} | {
        "SOAK_BROKER": broker,
        "SOAK_DATABASE": url,
        "PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(HERE)])),
    }
    procs: list[subprocess.Popen[bytes]] = []
    logdir = Path(os.environ.get("SOAK_LOGS", f"/tmp/{name}"))
    logdir.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run(
            [CELERY, "-A", "reaper_backlog_app", "tracked", "migrate"], env=environ, check=True
        )
        for i in range(opts.workers):
            cmd = [
                CELERY,
                "-A",
                "reaper_backlog_app",
                "worker",
                "-n",
                f"soak{i}@%h",
                "-Q",
                "soak",
                "-c",
                "2",
                "-l",
                "INFO",
            ]
            procs.append(
                subprocess.Popen(
                    cmd,
                    env=environ,
                    start_new_session=True,
                    stdout=open(logdir / f"w{i}.log", "wb"),  # noqa: SIM115 (the child keeps it)
                    stderr=subprocess.STDOUT,
                )
            )
        procs.append(
            subprocess.Popen(
                [
                    CELERY,
                    "-A",
                    "reaper_backlog_app",
                    "beat",
                    "-s",
                    str(logdir / "beat.db"),
                    "-l",
                    "INFO",
                ],
                env=environ,
                start_new_session=True,
                stdout=open(logdir / "beat.log", "wb"),  # noqa: SIM115 (the child keeps it)
                stderr=subprocess.STDOUT,
            )
        )
        sys.path.insert(0, str(HERE))
        os.environ.update(environ)
        import reaper_backlog_app as soak

        time.sleep(5)
        started = time.monotonic()
        ids = [soak.limited.enqueue(n=i).job_id for i in range(opts.limited)]
        ids += [soak.keyed.enqueue(n=i).job_id for i in range(opts.keyed)]
        deadline = started + opts.minutes * 60
        while time.monotonic() < deadline:
            time.sleep(15)
            now = counts(url)
            print(json.dumps({"t_s": round(time.monotonic() - started), **now}), flush=True)
            if now.get("status_completed", 0) == len(ids):
                break
        runs = [int(client.get(f"soak:ran:{i}") or 0) for i in ids]
        result = {
            "jobs": len(ids),
            "elapsed_s": round(time.monotonic() - started),
            "completed": counts(url).get("status_completed", 0),
            "ran_once": sum(1 for r in runs if r == 1),
            "ran_twice_or_more": sum(1 for r in runs if r > 1),
            "never_ran": sum(1 for r in runs if r == 0),
            **counts(url),
        }
        print("RESULT " + json.dumps(result), flush=True)
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        client.flushdb()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


if __name__ == "__main__":
    main()
