"""The soak's invariants, judged on the private database, the guard and the logs, and
printed as two tables (counts, invariants); the exit status."""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import redis
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from .faults import Fleet
from .servers import Postgres, Redis

#: The statuses each kind of job may end in. A secret job's redacted arguments are
#: sealed (``tracked_secret_key``): a lost message is rebuilt from its row, so it
#: completes like any other.
EXPECTED = {
    "plain": {"completed"},
    "ledger": {"completed"},
    "flaky": {"completed"},
    "doomed": {"failed"},
    "secret": {"completed"},
    "keyed_row": {"completed"},
    "keyed_ended": {"completed"},
}
EXAMPLES = 8


def _rows(engine: Any, statement: str, **params: Any) -> list[Any]:
    with engine.connect() as conn:
        return list(conn.execute(text(statement), params).all())


def _guard_text(guard: Redis) -> str:
    """Every key and value of the guard's Redis, as text."""
    client = redis.Redis.from_url(guard.url, decode_responses=True)
    parts = []
    try:
        for key in client.scan_iter(count=1000):
            kind = client.type(key)
            readers: dict[str, Any] = {
                "string": client.get,
                "hash": client.hgetall,
                "list": lambda k: client.lrange(k, 0, -1),
                "set": client.smembers,
                "zset": lambda k: client.zrange(k, 0, -1),
            }
            value = readers[kind](key) if kind in readers else kind
            parts.append(f"{key!s} {value!s}")
    finally:
        client.close()
    return "\n".join(parts)


def _ended_as(row: Any) -> str:
    """A job's status; an abandoned one (the reaper gave it up) says so."""
    return "failed (abandoned)" if row.error_type == "abandoned" else str(row.status)


class Verdicts:
    def __init__(self) -> None:
        self.rows: list[tuple[str, bool, str]] = []

    def add(self, name: str, problems: list[str], passed_detail: str) -> None:
        detail = (
            passed_detail if not problems else f"{len(problems)}: " + "; ".join(problems[:EXAMPLES])
        )
        self.rows.append((name, not problems, detail))

    @property
    def ok(self) -> bool:
        return all(ok for _, ok, _ in self.rows)


def _table(title: str, rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    widths[-1] = min(widths[-1], 100)
    line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    out = [title, line]
    for i, row in enumerate(rows):
        cells = (c[:100].ljust(w) for c, w in zip(row, widths, strict=True))
        out.append("| " + " | ".join(cells) + " |")
        if i == 0:
            out.append(line)
    out.append(line)
    return "\n".join(out)


def judge(
    pg: Postgres,
    guard: Redis,
    root: Any,
    fleet: Fleet,
    produced: Any,
    plan: Any,
    secret: str,
    drained: float,
    started: float,
) -> int:
    from .soak import DATABASE

    engine = create_engine(pg.url(DATABASE), poolclass=NullPool)
    try:
        jobs = _rows(
            engine,
            "SELECT id, task_name, status, error_type, attempts_made, idempotency_key "
            "FROM background_jobs",
        )
        events = dict(
            _rows(engine, "SELECT event, count(*) FROM background_job_events GROUP BY event")
        )
        ledger = dict(_rows(engine, "SELECT job_id, n FROM chaos_ledger"))
        starts = dict(_rows(engine, "SELECT job_id, count(*) FROM chaos_runs GROUP BY job_id"))
    finally:
        engine.dispose()
    verdicts = Verdicts()
    by_id = {row.id: row for row in jobs}
    kind_of = {row.id: row.task_name.split(".", 1)[1] for row in jobs}

    # 1. every enqueued job has its row, and ends in its expected status
    given = {job_id for ids in produced.ids.values() for job_id in ids}
    given |= set(produced.reenqueued.values())
    missing = sorted(given - set(by_id))
    verdicts.add(
        "every job given to the producer has its row",
        [f"{job_id} has no row" for job_id in missing] + produced.given_up,
        f"{len(given)} job ids, {len(jobs) - len(given)} rows of refused enqueues",
    )
    wrong = []
    for row in jobs:
        kind = kind_of[row.id]
        if row.status not in EXPECTED[kind]:
            wrong.append(f"{kind} {row.id} {row.status} ({row.error_type})")
    verdicts.add("every job ends in its expected status", wrong, f"{len(jobs)} jobs")

    # 2. no job stuck
    stuck = [
        f"{kind_of[r.id]} {r.id} {r.status}"
        for r in jobs
        if r.status in ("pending", "processing", "retrying")
    ]
    verdicts.add(
        "no job stuck (pending/processing/retrying) after the drain",
        stuck,
        f"all ended {drained:.0f} s after the faults stopped",
    )

    # 3. exactly-once effects
    twice = []
    for row in jobs:
        if kind_of[row.id] != "ledger":
            continue
        n = ledger.get(row.id, 0)
        if row.status == "completed" and n != 1:
            twice.append(f"{row.id} completed with its effect applied {n} times")
        if row.status != "completed" and n:
            twice.append(f"{row.id} {row.status} with its effect applied {n} times")
    strays = [f"{job_id} is no ledger job" for job_id in ledger if kind_of.get(job_id) != "ledger"]
    reran = sum(1 for job_id, count in starts.items() if count > 1 and ledger.get(job_id) == 1)
    verdicts.add(
        "self.transaction() effects applied exactly once",
        twice + strays,
        f"{len(ledger)} effects, once each; {reran} of these bodies started 2+ times",
    )

    # 4. keys: deduplicated, never blocked
    per_key = Counter(
        (r.task_name, r.idempotency_key) for r in jobs if kind_of[r.id] == "keyed_row"
    )
    doubled = [f"{key} has {n} rows" for key, n in per_key.items() if n > 1]
    verdicts.add(
        "one job per idempotency key (duplicates get it back)",
        produced.duplicate_mismatch + doubled,
        f"{len(per_key)} keys, {produced.duplicates} duplicate enqueues answered with their job",
    )
    verdicts.add(
        "no key blocked (an ended job's key makes a new job)",
        produced.reenqueue_refused,
        f"{len(produced.reenqueued)} ended keys enqueued again: a new job each",
    )

    # 5. no secret anywhere
    leaks = []
    logs = fleet.logs()
    dump = pg.dump(DATABASE)
    guard_text = _guard_text(guard)
    # the secret values, and the run's tracked_secret_key that seals them
    for needle in (secret, os.environ["CELERY_TRACKED_SECRET_KEY"]):
        for name, content in logs.items():
            if needle in content:
                leaks.append(f"log {name}: {content.count(needle)} times")
        if needle in dump:
            leaks.append(f"database dump: {dump.count(needle)} times")
        if needle in guard_text:
            leaks.append("guard Redis")
    scanned = sum(len(c) for c in logs.values()) + len(dump) + len(guard_text)
    verdicts.add(
        "no secret in rows, events, guard or logs",
        leaks,
        f"{scanned / 1e6:.1f} MB scanned ({len(produced.ids['secret'])} secret jobs)",
    )

    statuses = Counter((kind_of[r.id], _ended_as(r)) for r in jobs)
    counts: list[tuple[str, ...]] = [("kind", "jobs", "ended as", "attempts > 1")]
    for kind in EXPECTED:
        rows = [r for r in jobs if kind_of[r.id] == kind]
        ended = ", ".join(f"{s} {n}" for (k, s), n in sorted(statuses.items()) if k == kind)
        retried = sum(1 for r in rows if r.attempts_made > 1)
        counts.append((kind, str(len(rows)), ended, str(retried)))
    counts.append(("all", str(len(jobs)), "", str(sum(1 for r in jobs if r.attempts_made > 1))))
    faults = [("fault", "times")] + [(k, str(v)) for k, v in sorted(fleet.faults.items())]
    seen = [("event", "count")] + [(k, str(v)) for k, v in sorted(events.items())]
    print()
    print(_table("Jobs", counts))
    print(_table("Faults injected", faults))
    print(_table("Events recorded", seen))
    rows = [("invariant", "result", "detail")] + [
        (name, "PASS" if ok else "FAIL", detail) for name, ok, detail in verdicts.rows
    ]
    print(_table("Invariants", rows))
    for name, ok, detail in verdicts.rows:
        if not ok:
            print(f"FAILED: {name}: {detail}")
    wall = time.monotonic() - started
    print(
        f"chaos: {'PASSED' if verdicts.ok else 'FAILED'} in {wall:.0f} s "
        f"(seed {plan.seed}, {plan.minutes:g} min, {plan.jobs} jobs); "
        f"replay with CHAOS_SEED={plan.seed} CHAOS_MINUTES={plan.minutes:g}"
    )
    return 0 if verdicts.ok else 1
