"""Acceptance: every ``celery -A proj tracked`` command run with the real ``celery``
executable against a populated database (issue 13, item 5): the readable table, ``--json``
(stable keys), and the documented exit codes (0 done, 1 not found, 2 usage, 3 refused,
4 failed); colour only on a terminal, never with ``NO_COLOR``."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import uuid
from typing import Any

import pytest
from conftest import CELERY, HERE, worker_environ
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool
from tracked_app import QUEUE

JOB_KEYS = {
    "id", "status", "queue", "job_type", "task_name", "attempts", "attempts_made",
    "max_attempts", "priority", "progress", "stage", "error", "error_type", "error_message",
    "correlation_id", "parent_job_id", "owner_id", "tenant", "idempotency_key", "worker",
    "created_at", "due_at", "deadline_at", "started_at", "finished_at", "updated_at",
    "cancel_requested_at", "duration_ms",
}  # fmt: skip
ANSI = "\x1b["


@pytest.fixture
def populated(env: Any, start_worker: Any) -> dict[str, Any]:
    """2 completed, 2 failed (one with a redacted argument), 2 pending jobs."""
    canary = f"canary-{uuid.uuid4().hex}"
    start_worker()
    done = [env.task("acc.succeed").enqueue(x=f"payload-{canary}").job_id for _ in range(2)]
    failed = env.task("acc.always_fail").enqueue(x="a", _max_attempts=1).job_id
    secret = env.task("acc.secret").enqueue(user="bob", password=canary, fail_times=9)
    secret_id = secret.job_id
    for job_id in (*done, failed):
        env.wait_status(job_id, "completed", "failed", timeout=30)
    env.wait_status(secret_id, "failed", timeout=30)  # 3 attempts
    later = [
        env.task("acc.succeed").enqueue(x=n, _options={"countdown": 600}).job_id for n in range(2)
    ]
    return {
        "done": done,
        "failed": failed,
        "secret": secret_id,
        "pending": later,
        "all": [*done, failed, secret_id, *later],
        "canary": canary,
    }


def ok_json(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode == 0, result.stderr
    assert ANSI not in result.stdout  # piped: never colour
    return json.loads(result.stdout)


def test_jobs_lists_filters_and_pages(
    populated: dict[str, Any], cli_in_process: Any, run_cli: Any
) -> None:
    everything = populated["all"]
    table = run_cli("jobs")  # the real entry point once; the rest in process
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    header = lines[0]
    assert header.split() == [
        "ID", "STATUS", "QUEUE", "JOB", "TYPE", "PRIORITY", "ATTEMPTS", "CREATED", "DUE", "ENDED",
        "ERROR",
    ]  # fmt: skip
    rows = lines[1:]
    assert [row.split()[0] for row in rows] == everything[::-1]  # newest first
    column = header.index("STATUS")
    assert all(row[column:].split()[0] in {"completed", "failed", "pending"} for row in rows)
    assert all(" ago" in row for row in rows)
    assert populated["canary"] not in table.stdout

    listing = ok_json(cli_in_process("jobs", "--json"))
    assert set(listing) == {"jobs", "next_cursor"} and listing["next_cursor"] is None
    assert [j["id"] for j in listing["jobs"]] == everything[::-1]
    assert all(set(j) == JOB_KEYS for j in listing["jobs"])
    assert populated["canary"] not in json.dumps(listing)

    seen: list[str] = []
    cursor: list[str] = []
    while True:
        page = ok_json(cli_in_process("jobs", "--limit", "4", "--json", *cursor))
        seen += [j["id"] for j in page["jobs"]]
        if page["next_cursor"] is None:
            break
        cursor = ["--cursor", page["next_cursor"]]
    assert seen == everything[::-1]
    more = cli_in_process("jobs", "--limit", "4")
    assert more.returncode == 0 and "more: add --cursor " in more.stdout

    def listed(*args: str) -> list[str]:
        return [j["id"] for j in ok_json(cli_in_process("jobs", "--json", *args))["jobs"]]

    failed = {populated["failed"], populated["secret"]}
    assert set(listed("--status", "failed")) == failed
    assert set(listed("--status", "pending,completed")) == {
        *populated["done"],
        *populated["pending"],
    }
    assert listed("--error-type", "ValueError") == [populated["failed"]]
    assert listed("--task", "acc.secret", "--queue", QUEUE) == [populated["secret"]]
    assert len(listed("--created-after", "1h")) == 6
    assert listed("--finished-before", "1d") == []
    empty = cli_in_process("jobs", "--created-before", "2h")
    assert empty.returncode == 0 and empty.stdout.strip() == "no jobs match"

    for bad in (["--status", "nope"], ["--cursor", "garbage"], ["--limit", "0"], ["--since"]):
        refused = cli_in_process("jobs", *bad)
        assert refused.returncode == 2, (bad, refused.stdout, refused.stderr)
        assert "Traceback" not in refused.stderr


def test_show_and_pipeline(populated: dict[str, Any], cli_in_process: Any) -> None:
    job_id = populated["failed"]
    table = cli_in_process("show", job_id)
    assert table.returncode == 0, table.stderr
    assert f"id               {job_id}" in table.stdout
    assert "status           failed" in table.stdout
    assert "AT" in table.stdout and "enqueued" in table.stdout
    shown = ok_json(cli_in_process("show", job_id, "--json"))
    assert set(shown) == JOB_KEYS | {"history", "held"}  # held: why it waits unsent
    assert [e["event"] for e in shown["history"]] == ["enqueued", "started", "failed"]
    assert set(shown["history"][0]) == {
        "id", "event", "status", "attempt", "message", "duration_ms", "created_at"
    }  # fmt: skip
    secret = cli_in_process("show", populated["secret"], "--json")
    assert populated["canary"] not in secret.stdout + secret.stderr
    missing = cli_in_process("show", str(uuid.uuid4()))
    assert missing.returncode == 1 and "no job" in missing.stderr and missing.stdout == ""

    tree = cli_in_process("pipeline", job_id)
    assert tree.returncode == 0, tree.stderr
    assert tree.stdout.splitlines()[0] == f"pipeline {job_id}: failed (failed 1)"
    pipeline = ok_json(cli_in_process("pipeline", job_id, "--json"))
    assert set(pipeline) == {"correlation_id", "state", "counts", "jobs"}
    assert pipeline["state"] == "failed" and pipeline["jobs"][0]["depth"] == 0
    assert cli_in_process("pipeline", "nope").returncode == 1


def test_retry_and_cancel_one_job_and_their_refusals(
    env: Any, populated: dict[str, Any], cli_in_process: Any
) -> None:
    retried = cli_in_process("retry", populated["failed"])
    assert retried.returncode == 0, retried.stderr
    assert retried.stdout.splitlines()[0] == "retried 1 of 1 matching job(s)"
    env.wait_status(populated["failed"], "failed", timeout=30)  # fails again, once more

    secret = cli_in_process("retry", populated["secret"], "--json")
    assert secret.returncode == 3, secret.stderr
    report = json.loads(secret.stdout)
    assert report["changed"] == [] and "redacted" in report["refused"][populated["secret"]]
    assert populated["canary"] not in secret.stdout

    completed = cli_in_process("retry", populated["done"][0])
    assert completed.returncode == 3
    assert "it is completed: only failed or cancelled jobs are retried" in completed.stdout
    assert cli_in_process("retry", str(uuid.uuid4())).returncode == 1
    assert cli_in_process("retry").returncode == 2  # neither an id nor filters
    assert cli_in_process("retry", populated["failed"], "--status", "failed").returncode == 2
    assert cli_in_process("retry", "--status", "completed").returncode == 2  # never retried

    cancelled = ok_json(cli_in_process("cancel", populated["pending"][0], "--json"))
    assert cancelled["changed"] == [populated["pending"][0]]
    assert env.status(populated["pending"][0]) == "cancelled"
    again = cli_in_process("cancel", populated["pending"][0])
    assert again.returncode == 3 and "it is cancelled" in again.stdout
    running_done = cli_in_process("cancel", populated["done"][0], "--running")
    assert running_done.returncode == 3 and "it is completed" in running_done.stdout
    assert cli_in_process("cancel", str(uuid.uuid4())).returncode == 1
    bulk = cli_in_process("cancel", "--all", "--json")
    assert bulk.returncode == 0 and json.loads(bulk.stdout)["changed"] == [populated["pending"][1]]


def test_stats_and_migrate(populated: dict[str, Any], cli_in_process: Any) -> None:
    table = cli_in_process("stats")
    assert table.returncode == 0, table.stderr
    header, row = table.stdout.splitlines()
    assert header.split()[:9] == [
        "QUEUE", "PENDING", "PROCESSING", "RETRYING", "COMPLETED", "FAILED", "CANCELLED",
        "SCHEDULED", "TOTAL",
    ]  # fmt: skip
    assert row.split()[:9] == [QUEUE, "2", "0", "0", "2", "2", "0", "2", "6"]  # 2 due later
    stats = ok_json(cli_in_process("stats", "--json"))
    assert set(stats[QUEUE]) == {
        "counts", "total", "oldest_pending_age_s", "scheduled", "failed_last_hour",
        "expired_leases", "paused",
    }  # fmt: skip
    assert stats[QUEUE]["paused"] is None
    assert stats[QUEUE]["failed_last_hour"] == 2 and stats[QUEUE]["expired_leases"] == 0
    migrated = cli_in_process("migrate")
    assert migrated.returncode == 0 and "head" in migrated.stdout


def test_a_database_that_cannot_be_reached_exits_4_with_one_line(env: Any, run_cli: Any) -> None:
    unreachable = {"CELERY_TRACKED_DATABASE_URL": "postgresql+psycopg://u:s3cret@127.0.0.1:1/x"}
    for args in (["jobs"], ["show", str(uuid.uuid4())], ["stats"], ["cancel", "--all"]):
        out = run_cli(*args, environ=unreachable)
        assert out.returncode == 4, (args, out.stdout, out.stderr)
        assert "failed" in out.stderr and "Traceback" not in out.stderr
        assert "s3cret" not in out.stderr


def run_in_a_terminal(env: Any, *args: str, environ: dict[str, str] | None = None) -> str:
    """``celery ... tracked <args>`` with its output on a pseudo-terminal."""
    main, child = pty.openpty()
    proc = subprocess.Popen(
        [CELERY, "-A", "tracked_app", "tracked", *args],
        cwd=str(HERE),
        env=worker_environ(env.config, None, {"TERM": "xterm", **(environ or {})}),
        stdout=child,
        stderr=child,
    )
    os.close(child)
    chunks: list[bytes] = []
    while True:
        try:
            data = os.read(main, 65536)
        except OSError:  # the terminal closed with the process
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=60)
    os.close(main)
    out = b"".join(chunks).decode()
    assert proc.returncode == 0, out
    return out


def test_colour_only_on_a_terminal_and_never_with_no_color(
    env: Any, populated: dict[str, Any]
) -> None:
    coloured = run_in_a_terminal(env, "jobs")
    assert "\x1b[32mcompleted" in coloured and "\x1b[31mfailed" in coloured
    plain = run_in_a_terminal(env, "jobs", environ={"NO_COLOR": "1"})
    assert ANSI not in plain and "completed" in plain


def test_cleanup_and_reap(populated: dict[str, Any], cli_in_process: Any, env: Any) -> None:
    """``cleanup --dry-run`` counts, ``cleanup`` removes (table and ``--json``), ``reap``
    reports what it did; nothing here is old enough or stalled, then two jobs are."""
    dry = ok_json(cli_in_process("cleanup", "--dry-run", "--json"))
    assert dry["dry_run"] is True and dry["total"] == 0
    table = cli_in_process("cleanup", "--dry-run")
    assert table.returncode == 0 and "WOULD REMOVE" in table.stdout, table.stderr
    # two ended jobs made old: the cleanup removes exactly them
    old = [populated["done"][0], populated["failed"]]
    ids = ", ".join(f"'{job_id}'" for job_id in old)
    engine = create_engine(env.database_url, poolclass=NullPool)
    with engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE background_jobs SET finished_at = now() - interval '400 days' "
                f"WHERE id IN ({ids})"
            )
        )
    engine.dispose()
    assert ok_json(cli_in_process("cleanup", "--dry-run", "--json"))["total"] == 2
    removed = ok_json(cli_in_process("cleanup", "--json"))
    assert removed["dry_run"] is False and removed["total"] == 2
    assert removed["removed"]["completed"] == 1 and removed["removed"]["failed"] == 1
    assert all(env.tracker.get_job(job_id) is None for job_id in old)
    assert ok_json(cli_in_process("cleanup", "--json"))["total"] == 0
    reaped = ok_json(cli_in_process("reap", "--json"))
    assert set(reaped) >= {"rescued", "abandoned", "left", "unpublished", "cancelled"}
    assert reaped["rescued"] == [] and reaped["abandoned"] == []
    nothing = cli_in_process("reap")
    assert nothing.returncode == 0 and "nothing stalled" in nothing.stdout, nothing.stderr
