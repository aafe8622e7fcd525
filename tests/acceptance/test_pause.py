"""Acceptance: pause and resume by job type (issue 26, item 3), with real ``celery worker``
processes, PostgreSQL and Redis; the CLI as a second process.

A paused job type's deliveries are held in the database (no message left in the broker,
no attempt used, one ``paused`` event per job) while another type flows; resuming
publishes them and each runs once. A worker started while paused honours it; a pause and
a resume through the CLI reach every running worker (two) within 5 s.
"""

from __future__ import annotations

import subprocess
import time
from typing import Any

import pytest
from conftest import CELERY, HERE, worker_environ

from celery_tracked import InvalidPause, InvalidPriority
from tests.conftest import wait_for

#: the acceptance's size: 1,000 jobs of the paused type
HELD = 1000
FLOWING = 50


def _held_count(env: Any) -> int:
    rows = env.sql(
        "SELECT count(*) FROM background_jobs WHERE job_type = 'ocr' AND locked_by = 'paused'"
        " AND published_at IS NULL AND status = 'pending'"
    )
    return int(rows[0][0])


def _cli(env: Any, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CELERY, "-A", "tracked_app", "tracked", *args],
        cwd=str(HERE),
        env=worker_environ(env.config),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_paused_job_type_waits_in_the_database_and_runs_once_resumed(
    env: Any, start_worker: Any
) -> None:
    pause = env.tracker.pause(job_type="ocr", reason="provider down", by="ops@test")
    assert (pause.scope, pause.name, pause.paused_by) == ("job_type", "ocr", "ops@test")
    worker = start_worker("w1", concurrency=2)  # started while paused: honours it
    ocr, mail = env.task("acc.ocr_page"), env.task("acc.mail_out")
    held = [ocr.enqueue(n=i).job_id for i in range(HELD)]
    flowing = [mail.enqueue(n=i).job_id for i in range(FLOWING)]
    for job_id in flowing:  # the other type is unaffected
        env.wait_status(job_id, "completed", timeout=120)
    wait_for(lambda: _held_count(env) == HELD, timeout=180, what="every ocr job held")
    # nothing of it in the broker, and nothing re-published while it waits: measured
    wait_for(lambda: env.broker_empty(), timeout=30, what="the last messages acknowledged")
    start = time.monotonic()
    events_before = env.sql("SELECT count(*) FROM background_job_events")[0][0]
    records_before = len(worker.records())
    assert records_before >= HELD  # each delivery was logged (the held ones included)
    while time.monotonic() - start < 3.0:
        assert env.broker_empty(), "a held job's message is in the broker"
        time.sleep(0.25)
    events_after = env.sql("SELECT count(*) FROM background_job_events")[0][0]
    # no delivery (each is logged: held, skipped or postponed) and no event: 0 re-publishes
    assert (events_after, len(worker.records())) == (events_before, records_before)
    rows = env.sql(
        "SELECT max(attempts_made), min(revision), max(revision) FROM background_jobs"
        " WHERE job_type = 'ocr'"
    )
    assert tuple(rows[0]) == (0, 1, 1)  # no attempt used; one hold (revision) each
    paused_events = env.sql(
        "SELECT count(*), count(DISTINCT job_id) FROM background_job_events WHERE event = 'paused'"
    )
    assert tuple(paused_events[0]) == (HELD, HELD)  # one `paused` event per job
    assert all(env.ran(job_id) == 0 for job_id in held[:50])
    assert [p.name for p in env.tracker.paused()] == ["ocr"]
    assert env.tracker.stats()["acc"]["paused"] is None  # the queue itself is not paused

    started = time.monotonic()
    assert env.tracker.resume(job_type="ocr")
    for job_id in held:
        env.wait_status(job_id, "completed", timeout=240)
    elapsed = time.monotonic() - started
    print(f"{HELD} held jobs published and completed {elapsed:.1f} s after resume")
    runs = env.sql("SELECT max(attempts_made), min(attempts_made) FROM background_jobs")
    assert tuple(runs[0]) == (1, 1)
    assert all(env.ran(job_id) == 1 for job_id in held)  # each once
    starts = [s.decode() for s in env.redis.lrange("control:starts", 0, -1)]
    ocr_starts = [s for s in starts if s in set(held)]
    assert len(ocr_starts) == HELD
    early = set(ocr_starts[: HELD // 2])  # in their order (oldest first), roughly
    assert len(early & set(held[: HELD // 2])) > HELD * 0.4


def _fate(env: Any, job_id: str) -> str | None:
    """``paused`` (held) or ``completed`` (ran), once one happened to the job."""
    rows = env.sql(
        "SELECT event FROM background_job_events WHERE job_id = :j"
        " AND event IN ('paused', 'completed')",
        j=job_id,
    )
    return str(rows[0][0]) if rows else None


def _receiver(workers: list[Any], job_id: str) -> str:
    """The name of the worker that received the job's message (its log says so)."""
    line = f"acc.ocr_page[{job_id}] received"
    found = [w.name for w in workers if line in w.log()]
    assert len(found) == 1, f"{job_id} received by {found}"
    return found[0]


def _probe_until(env: Any, workers: list[Any], held: bool, timeout: float = 5.0) -> float:
    """Enqueue an ``ocr`` probe every 0.2 s until each worker has held one (``held``) or
    run one: the seconds it took (a pause or a resume seen by every running worker)."""
    start = time.monotonic()
    seen: set[str] = set()
    while time.monotonic() - start < timeout:
        job_id = env.task("acc.ocr_page").enqueue(n=0).job_id
        fate = wait_for(lambda j=job_id: _fate(env, j), timeout=10, what="the probe's fate")
        if (fate == "paused") == held:
            seen.add(wait_for(lambda j=job_id: _receiver(workers, j), what="its receiver"))
            if seen == {w.name for w in workers}:
                return time.monotonic() - start
        time.sleep(0.2)
    raise AssertionError(f"not {'held' if held else 'running'} by every worker within {timeout} s")


def test_a_pause_and_a_resume_through_the_cli_reach_every_running_worker(
    env: Any, start_worker: Any
) -> None:
    workers = [start_worker("w1", concurrency=1), start_worker("w2", concurrency=1)]
    env.wait_status(env.task("acc.ocr_page").enqueue(n=1).job_id, "completed")
    out = _cli(env, "pause", "--job-type", "ocr", "--reason", "maintenance", "--by", "cli")
    assert out.returncode == 0, out.stderr
    assert "job type 'ocr' paused by cli" in out.stdout
    seen = _probe_until(env, workers, held=True)
    print(f"the pause seen by both running workers after {seen:.2f} s")
    listed = _cli(env, "paused")
    assert "job_type" in listed.stdout and "maintenance" in listed.stdout, listed.stdout
    out = _cli(env, "resume", "--job-type", "ocr")
    assert out.returncode == 0 and "resumed" in out.stdout, out.stderr
    seen = _probe_until(env, workers, held=False)
    print(f"the resume seen by both running workers after {seen:.2f} s")
    wait_for(lambda: _held_count(env) == 0, timeout=30, what="the held probes published")
    assert _cli(env, "paused").stdout.strip() == "nothing is paused"


def test_bad_input_is_refused_before_anything_is_written(env: Any) -> None:
    with pytest.raises(InvalidPause, match="unknown queue 'nope'"):
        env.tracker.pause(queue="nope")
    with pytest.raises(InvalidPause, match="exactly one scope"):
        env.tracker.pause(queue="acc", job_type="ocr")
    with pytest.raises(InvalidPause, match="exactly one scope"):
        env.tracker.pause()
    with pytest.raises(InvalidPause, match="unknown job type"):
        env.tracker.pause(job_type="nope")
    assert env.tracker.paused() == []
    before = env.sql("SELECT count(*) FROM background_jobs")[0][0]
    keys = set(env.redis.keys("*"))
    with pytest.raises(InvalidPriority, match="0 to 9"):  # the Redis transport's range
        env.task("acc.ocr_page").apply_async(kwargs={"n": 1}, priority=10)
    assert env.sql("SELECT count(*) FROM background_jobs")[0][0] == before
    assert set(env.redis.keys("*")) == keys  # no message, no guard key
    out = _cli(env, "pause", "--queue", "nope")
    assert out.returncode == 2 and "unknown queue 'nope'" in out.stderr, out.stderr
    job = env.task("acc.ocr_page").apply_async(kwargs={"n": 1}, priority=7)
    assert env.tracker.get_job(job.id).priority == 7
    assert [j.id for j in env.tracker.jobs(priority=7).jobs] == [job.id]
