"""The CLI as an operator meets it (issue 22, items 9, 11 and 12): job data never reaches
a terminal raw, bad option values are usage errors (exit 2), the read-only commands run
on a host that reaches the database only, ``show`` explains a failure that was not retried
and a lease that expired, ``pipeline`` draws a tree, ``downgrade`` asks first, and a bulk
retry skips the failures no retry was meant for.

The output checks run the ``tracked`` group in process (click's ``CliRunner``); the entry
point, the exit codes and the terminal run the real ``celery`` executable, on a real
pseudo-terminal through ``script``.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import subprocess
import types
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import cli_proj
import pytest
from celery import Celery
from click.testing import CliRunner, Result
from conftest import CELERY, HERE, ROOT
from sqlalchemy import create_engine, inspect, update
from sqlalchemy.pool import NullPool

from celery_tracked import Tracker
from celery_tracked.cli import tracked
from celery_tracked.core.jobs import utcnow
from celery_tracked.migrate import upgrade
from celery_tracked.store.models import jobs as jobs_table

#: an error message that would set the title, clear the screen and print a fake red line
EVIL = "\x1b]0;pwned\x07\x1b[2J\x1b[31mall jobs completed\x1b[0m\u202eevil"
RAW = ("\x1b]", "\x1b[2J", "\x07", "\x1b[31mall", "\u202e")


@pytest.fixture
def ops_db(tmp_path: Path) -> Iterator[str]:
    """A migrated SQLite database; ``cli_proj.app`` produces on it, eagerly."""
    url = f"sqlite:///{tmp_path / 'ops.sqlite3'}"
    upgrade(url)
    app = cli_proj.app
    saved = {k: app.conf.get(k) for k in ("tracked_database_url", "tracked_redis_url")}
    app.conf.update(tracked_database_url=url, tracked_redis_url="memory://", task_always_eager=True)
    try:
        yield url
    finally:
        Tracker.forget(app)
        app.conf.update(task_always_eager=False, **saved)


def cli(*args: str, app: Celery | None = None, stdin: str | None = None) -> Result:
    """``celery -A cli_proj tracked <args>``, in process."""
    obj = types.SimpleNamespace(app=app or cli_proj.app)
    return CliRunner().invoke(tracked, list(args), obj=obj, input=stdin)


def failed_jobs() -> dict[str, str]:
    return {
        "strict": cli_proj.strict.enqueue("no retry declared").job_id,
        "picky": cli_proj.picky.enqueue("not in autoretry_for").job_id,
        "gone": cli_proj.gone.enqueue("the thing is gone").job_id,
        "down": cli_proj.down.enqueue("its one attempt used").job_id,
    }


def test_show_says_why_a_failed_job_was_not_retried(ops_db: str) -> None:
    ids = failed_jobs()

    def attempts(name: str) -> str:
        out = cli("show", ids[name], "--no-history")
        assert out.exit_code == 0, out.output
        return next(line for line in out.output.splitlines() if line.startswith("attempts"))

    assert "1/3" in attempts("strict") and "autoretry_for=()" in attempts("strict")
    assert "KeyError is not in its task's autoretry_for" in attempts("picky")
    assert "Unrecoverable" in attempts("gone")
    assert attempts("down").split() == ["attempts", "1/1"]  # used up: nothing to explain


def test_show_says_how_long_ago_the_lease_of_a_gone_run_expired(ops_db: str) -> None:
    job_id = cli_proj.leaf.enqueue(1).job_id
    engine = create_engine(ops_db, poolclass=NullPool)
    try:
        with engine.begin() as conn:  # the row a worker killed mid-run leaves behind
            conn.execute(
                update(jobs_table)
                .where(jobs_table.c.id == job_id)
                .values(
                    status="processing",
                    locked_by="host:1:1:4242",
                    locked_until=utcnow() - timedelta(seconds=42),
                    finished_at=None,
                )
            )
    finally:
        engine.dispose()
    out = cli("show", job_id, "--no-history")
    assert out.exit_code == 0, out.output
    lease = next(line for line in out.output.splitlines() if line.startswith("lease"))
    seconds = int(lease.split("expired ")[1].split()[0])
    assert 41 <= seconds <= 60 and "its run is gone" in lease, lease


def test_pipeline_draws_siblings_as_branches(ops_db: str) -> None:
    root = cli_proj.fan.enqueue(3).job_id
    out = cli("pipeline", root)
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()[1:]
    assert lines[0].startswith("└─ ops.fan")
    assert [line[:6] for line in lines[1:]] == ["   ├─ ", "   ├─ ", "   └─ "], lines


def test_bulk_retry_skips_failures_not_to_be_retried_unless_asked(ops_db: str) -> None:
    ids = failed_jobs()
    out = cli("retry", "--status", "failed", "--json")
    assert out.exit_code == 0, out.output
    report = json.loads(out.output)
    assert report["changed"] == [ids["down"]]
    assert set(report["skipped"]) == {ids["strict"], ids["picky"], ids["gone"]}
    assert report["refused"] == {} and report["matched"] == 4
    table = cli("retry", "--status", "failed")
    assert "add --include-unrecoverable" in table.output
    out = cli("retry", "--status", "failed", "--include-unrecoverable", "--json")
    report = json.loads(out.output)
    assert set(report["changed"]) >= {ids["strict"], ids["picky"], ids["gone"]}
    assert report["skipped"] == {}


def test_job_data_is_escaped_in_tables_show_pipeline_and_log_lines(
    ops_db: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="celery_tracked"):
        job_id = cli_proj.strict.enqueue(EVIL).job_id
    lines = [r.getMessage() for r in caplog.records if r.name == "celery_tracked"]
    assert any("\\x1b]0;pwned\\x07" in line for line in lines), lines
    assert not any(raw in line for line in lines for raw in RAW)
    for args in (["jobs"], ["show", job_id], ["pipeline", job_id], ["retry", job_id], ["stats"]):
        out = cli(*args)
        assert not any(raw in out.output for raw in RAW), (args, out.output)
        if args[0] not in ("retry", "stats"):
            assert "\\x1b]0;pwned\\x07\\x1b[2J\\x1b[31mall jobs" in out.output, out.output


def test_downgrade_asks_first_and_names_the_database_masked() -> None:
    app = Celery("pw", broker="memory://", set_as_current=False)
    app.conf.tracked_database_url = "postgresql+psycopg://ops:s3cret@127.0.0.1:1/prod"
    out = cli("downgrade", "base", app=app, stdin="n\n")
    assert out.exit_code == 1, out.output
    assert "127.0.0.1:1/prod" in out.output and "s3cret" not in out.output
    assert "DROP the tracking tables" in out.output


# -- the real executable -----------------------------------------------------------------


def ops_environ(database_url: str, **more: str) -> dict[str, str]:
    """An ops host's environment: the database's URL, no Redis setting at all."""
    environ = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("CELERY_TRACKED_") and k not in ("REDIS_URL", "NO_COLOR")
    }
    environ.update(
        CELERY_TRACKED_DATABASE_URL=database_url,
        PYTHONPATH=os.pathsep.join((str(HERE), str(ROOT))),
        **more,
    )
    return environ


def run(
    database_url: str, *args: Any, stdin: str | None = None, redis: str | None = None
) -> subprocess.CompletedProcess[str]:
    more = {} if redis is None else {"CELERY_TRACKED_REDIS_URL": redis}
    return subprocess.run(
        [CELERY, "-A", "cli_proj", "tracked", *args],
        cwd=str(HERE),
        env=ops_environ(database_url, **more),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_read_only_commands_run_with_the_database_alone(ops_db: str) -> None:
    ids = failed_jobs()
    root = cli_proj.fan.enqueue(2).job_id
    for args in (["jobs"], ["show", ids["strict"]], ["stats"], ["pipeline", root]):
        out = run(ops_db, *args)
        assert out.returncode == 0, (args, out.stdout, out.stderr)
    # a command that moves jobs still needs the guard's Redis, and says so
    moved = run(ops_db, "retry", ids["down"])
    assert moved.returncode == 4 and "tracked_redis_url" in moved.stderr, moved.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["jobs", "--created-after", "99999999w"],
        ["jobs", "--created-after", "10000000000000000000000000d"],
        ["jobs", "--task", b"acc.\xff"],  # not UTF-8: a lone surrogate in Python
    ],
)
def test_bad_values_are_usage_errors(ops_db: str, args: list[Any]) -> None:
    out = subprocess.run(
        [CELERY, "-A", "cli_proj", "tracked", *args],
        cwd=str(HERE),
        env=ops_environ(ops_db, CELERY_TRACKED_REDIS_URL="memory://"),
        capture_output=True,
        timeout=60,
    )
    stderr = out.stderr.decode(errors="replace")
    assert out.returncode == 2, (args, stderr)
    assert "Traceback" not in stderr and "failed" not in stderr, stderr
    assert "UTF-8" in stderr or "duration" in stderr, stderr


@pytest.mark.parametrize(
    "args",
    [
        ["jobs", "--finished-before", "99999999w"],
        ["retry", "--task", "\udcff", "--status", "failed"],
        ["cancel", "--owner", "x\udcff", "--all"],
        ["show", "\udcff"],
        ["pipeline", "\udcff"],
    ],
)
def test_bad_values_are_usage_errors_in_every_command(ops_db: str, args: list[str]) -> None:
    out = cli(*args)
    assert out.exit_code == 2, (args, out.output)
    assert "failed" not in out.output, out.output


def test_downgrade_base_asks_before_dropping_the_tables(ops_db: str) -> None:
    path = ops_db.removeprefix("sqlite:///")
    kept = run(ops_db, "downgrade", "base", stdin="n\n")
    assert kept.returncode == 1, kept.stderr
    assert path in kept.stderr and "DROP" in kept.stderr
    assert "background_jobs" in tables(ops_db)
    dropped = run(ops_db, "downgrade", "base", "--yes")
    assert dropped.returncode == 0, dropped.stderr
    assert path in dropped.stdout and "background_jobs" not in tables(ops_db)


def tables(url: str) -> set[str]:
    engine = create_engine(url, poolclass=NullPool)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def in_a_terminal(database_url: str, *args: str, no_color: bool) -> str:
    """``celery ... tracked <args>`` on a real pseudo-terminal (``script``)."""
    command = shlex.join([CELERY, "-A", "cli_proj", "tracked", *args])
    more = {"TERM": "xterm", "CELERY_TRACKED_REDIS_URL": "memory://"}
    environ = ops_environ(database_url, **more, **({"NO_COLOR": "1"} if no_color else {}))
    out = subprocess.run(
        ["script", "-qec", command, "/dev/null"],
        cwd=str(HERE),
        env=environ,
        capture_output=True,
        timeout=60,
    )
    text = out.stdout.decode(errors="replace")
    assert out.returncode == 0, text
    return text


def test_a_terminal_never_receives_the_escapes_of_job_data(ops_db: str) -> None:
    job_id = cli_proj.strict.enqueue(EVIL).job_id
    shown = "\\x1b]0;pwned\\x07\\x1b[2J\\x1b[31mall jobs"
    coloured = in_a_terminal(ops_db, "show", job_id, no_color=False)
    plain = in_a_terminal(ops_db, "show", job_id, no_color=True)
    piped = run(ops_db, "show", job_id, redis="memory://")
    assert piped.returncode == 0, piped.stderr
    listed = in_a_terminal(ops_db, "jobs", no_color=False)
    for out in (coloured, plain, piped.stdout, listed):
        assert not any(raw in out for raw in RAW), out
        assert shown in out, out
    assert "\x1b[" not in plain and "\x1b[" not in piped.stdout
    assert "\x1b[31mfailed" in listed and "\x1b[31m" in coloured  # the CLI's own colour
