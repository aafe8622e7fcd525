"""Server-side counters around a phase: Redis ``INFO`` and PostgreSQL's statistics views.

A snapshot is a flat ``{name: number}``; the cost of a phase is the difference of two
snapshots divided by the jobs. Redis counters and ``pg_stat_wal`` are server-wide: on a
shared server they include everybody's traffic (the plain contender, which never touches
PostgreSQL, shows that background level). ``pg_stat_database`` and
``pg_stat_user_tables`` are per database (the bench's own).
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
import redis

REDIS_STATS = ("total_commands_processed", "total_net_input_bytes", "total_net_output_bytes")
PG_DATABASE = (
    "xact_commit",
    "xact_rollback",
    "tup_inserted",
    "tup_updated",
    "tup_deleted",
    "tup_fetched",
    "blks_read",
    "blks_hit",
)
PG_WAL = ("wal_records", "wal_fpi", "wal_bytes", "wal_write", "wal_sync")
PG_TABLES = ("n_tup_ins", "n_tup_upd", "n_tup_hot_upd", "n_tup_del")
#: the snapshots themselves
IGNORED_COMMANDS = {"info"}


def libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def redis_snapshot(client: redis.Redis) -> dict[str, float]:
    out: dict[str, float] = {}
    stats: Any = client.info("stats")
    for key in REDIS_STATS:
        out[f"redis.{key}"] = float(stats[key])
    commands: Any = client.info("commandstats")
    for key, value in commands.items():
        name = key.removeprefix("cmdstat_")
        out[f"redis.cmd.{name}"] = float(value["calls"])
    return out


def pg_snapshot(url: str) -> dict[str, float]:
    """Counters of the database of ``url`` (read from a connection to it)."""
    out: dict[str, float] = {}
    with psycopg.connect(libpq(url), autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            f"SELECT {', '.join(PG_DATABASE)} FROM pg_stat_database "
            "WHERE datname = current_database()"
        ).fetchone()
        for key, value in zip(PG_DATABASE, row or (), strict=False):
            out[f"pg.{key}"] = float(value or 0)
        wal = conn.execute(f"SELECT {', '.join(PG_WAL)} FROM pg_stat_wal").fetchone()
        for key, value in zip(PG_WAL, wal or (), strict=False):
            out[f"pg.{key}"] = float(value or 0)
        tables = conn.execute(
            f"SELECT relname, {', '.join(PG_TABLES)} FROM pg_stat_user_tables"
        ).fetchall()
        for relname, *values in tables:
            for key, value in zip(PG_TABLES, values, strict=True):
                out[f"pg.table.{relname}.{key}"] = float(value or 0)
    return out


def snapshot(client: redis.Redis, pg_url: str | None) -> dict[str, float]:
    out = redis_snapshot(client)
    if pg_url:
        out.update(pg_snapshot(pg_url))
    return out


def settle() -> None:
    """Let exited backends' statistics reach the shared counters."""
    time.sleep(0.5)


def delta(before: dict[str, float], after: dict[str, float], jobs: int) -> dict[str, float]:
    """Per-job difference of two snapshots (counters missing before count from 0)."""
    out: dict[str, float] = {}
    for key, value in after.items():
        if key.startswith("redis.cmd.") and key.removeprefix("redis.cmd.") in IGNORED_COMMANDS:
            continue
        diff = value - before.get(key, 0.0)
        if diff:
            out[key] = diff / jobs
    return out


def summary(per_job: dict[str, float]) -> dict[str, Any]:
    """The few numbers a reader wants first, from a per-job delta."""
    commands = {
        k.removeprefix("redis.cmd."): v for k, v in per_job.items() if k.startswith("redis.cmd.")
    }
    ins = sum(v for k, v in per_job.items() if k.endswith(".n_tup_ins"))
    upd = sum(v for k, v in per_job.items() if k.endswith(".n_tup_upd"))
    hot = sum(v for k, v in per_job.items() if k.endswith(".n_tup_hot_upd"))
    return {
        "redis_commands": sum(commands.values()),
        "redis_by_command": dict(sorted(commands.items(), key=lambda kv: -kv[1])),
        "redis_in_bytes": per_job.get("redis.total_net_input_bytes", 0.0),
        "redis_out_bytes": per_job.get("redis.total_net_output_bytes", 0.0),
        "pg_xacts": per_job.get("pg.xact_commit", 0.0) + per_job.get("pg.xact_rollback", 0.0),
        "pg_rows_inserted": ins,
        "pg_rows_updated": upd,
        "pg_hot_pct": 100 * hot / upd if upd else float("nan"),
        "wal_records": per_job.get("pg.wal_records", 0.0),
        "wal_bytes": per_job.get("pg.wal_bytes", 0.0),
        "wal_syncs": per_job.get("pg.wal_sync", 0.0),
    }
