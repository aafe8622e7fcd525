"""Acceptance: self-chaining pipelines (issue 8), the example's course generation with a
real Redis, PostgreSQL and real ``celery worker`` processes."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import HERE, Worker, terminate_worker_connections, worker_environ
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from celery_tracked import JobStatus, RetryRefused, Tracker
from tests.conftest import wait_for

QUEUE = "course_generation_test"
STEPS_OF_3 = 1 + 3 + 3 + 1 + 1


@pytest.fixture
def courses(env: Any, tmp_path: Path) -> Iterator[Any]:
    """The example's app, configured for this test's services (in this process)."""
    from example_project.courses import celery_app as app

    # Celery's ``close()`` keeps the producer pool of the broker the previous test used (a
    # test gets another Redis DB whenever a concurrent run holds its last one): drop it
    app.__dict__.pop("amqp", None)
    app.conf.update(
        broker_url=env.config["broker"],
        tracked_database_url=env.config["database_url"],
        tracked_redis_url=env.config["redis_url"],
        task_default_queue=QUEUE,
        tracked_relay_grace_seconds=1,
    )
    app.__dict__.pop("_celery_tracked_tracker", None)
    faults = tmp_path / "faults"
    faults.write_text("")
    yield app, faults
    tracker = app.__dict__.pop("_celery_tracked_tracker", None)
    if tracker is not None:
        tracker.close()
    app.close()  # its broker connections; the next use opens new ones


@pytest.fixture
def course_worker(env: Any, tmp_path: Path) -> Iterator[Callable[..., Worker]]:
    started: list[Worker] = []

    def start(name: str = "c1", concurrency: int = 2, **extra: str | None) -> Worker:
        log_path = tmp_path / f"worker-{name}.log"
        log_file = log_path.open("wb")
        cmd = [sys.executable, "-m", "celery", "-A", "courses_worker", "worker", "-P", "prefork"]
        cmd += ["-c", str(concurrency), "-Q", QUEUE, "-n", f"{name}@%h", "-l", "info"]
        cmd += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
        environ = worker_environ(
            env.config,
            None,
            {
                "CELERY_BROKER_URL": env.config["broker"],
                "CELERY_TRACKED_REDIS_URL": env.config["redis_url"],
                "CELERY_TRACKED_LEASE_SECONDS": "3",
                "COURSES_QUEUE": QUEUE,
                "COURSES_BACKOFF_MS": "100",
                "COURSE_AI_LATENCY_MS": "30",
                "CELERY_TRACKED_RATE_LIMIT_MS": "20",  # the example's AI limiter, kept short
                "COURSE_AI_FAULTS_FILE": str(tmp_path / "faults"),
                "COURSES_TEST_STATE": str(tmp_path),
                **extra,
            },
        )
        proc = subprocess.Popen(
            cmd,
            cwd=str(HERE),
            env=environ,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        worker = Worker(name, proc, log_path, tmp_path / f"{name}.jsonl", log_file)
        started.append(worker)
        wait_for(lambda: " ready." in worker.log() or proc.poll() is not None, timeout=30)
        assert proc.poll() is None, worker.log()
        return worker

    yield start
    for worker in started:
        worker.stop()
    for worker in started:
        print(f"===== worker {worker.name} =====\n{worker.log()[-15000:]}")


def rows(env: Any, correlation_id: str) -> list[Any]:
    engine = create_engine(env.database_url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return list(
                conn.execute(
                    text(
                        "SELECT id, job_type, status, parent_job_id, idempotency_key, "
                        "attempts_made, started_at, finished_at FROM background_jobs "
                        "WHERE correlation_id = :c ORDER BY created_at"
                    ),
                    {"c": correlation_id},
                )
            )
    finally:
        engine.dispose()


def started_events(env: Any, job_id: str) -> int:
    return len([e for e in env.tracker.history(job_id) if e.event in ("started", "redelivered")])


def pipeline_ended(tracker: Tracker, cid: str) -> Callable[[], bool]:
    return lambda: tracker.pipeline(cid).state != "running"


def test_a_course_of_three_modules_runs_to_its_mastery_analysis(
    env: Any, courses: Any, course_worker: Any
) -> None:
    app, _ = courses
    from example_project.courses.tasks import start

    course_worker()
    cid = start("c1", 3)
    tracker = Tracker.for_app(app)
    wait_for(pipeline_ended(tracker, cid), timeout=60, what="the course to end")
    pipeline = tracker.pipeline(cid)
    assert pipeline.state == "completed"
    assert pipeline.counts["completed"] == STEPS_OF_3 == len(pipeline.jobs)
    keys = [job.idempotency_key for job in pipeline.jobs]
    assert keys == [
        "outline:c1",
        "module_lessons:c1-m1",
        "module_exam:c1-m1",
        "module_lessons:c1-m2",
        "module_exam:c1-m2",
        "module_lessons:c1-m3",
        "module_exam:c1-m3",
        "final_exam:c1",
        "mastery_analysis:c1",
    ]
    # one chain: every step's parent is the step before it
    parents = [job.parent_job_id for job in pipeline.jobs]
    assert parents == [None] + [job.id for job in pipeline.jobs[:-1]]
    assert {job.correlation_id for job in pipeline.jobs} == {cid}
    assert all(started_events(env, job.id) == 1 for job in pipeline.jobs)
    for job in pipeline.jobs:  # a step waiting for its course's slot may be handed it
        seen = [e.event for e in tracker.history(job.id)]
        assert [e for e in seen if e != "slot_handed"] == ["enqueued", "started", "completed"]
        assert seen.count("slot_handed") <= 1, seen
    assert tracker.wait(pipeline.jobs[-1].id)["with_final_exam"] is True
    # starting the same course again is the same course
    assert start("c1", 3) == cid


def test_credits_exhausted_halts_one_course_while_another_completes(
    env: Any, courses: Any, course_worker: Any
) -> None:
    app, faults = courses
    from example_project.courses.tasks import start

    faults.write_text("module_exam:c2-m2=credits\n")
    course_worker(concurrency=2)
    halted, other = start("c2", 3), start("c3", 3)
    tracker = Tracker.for_app(app)
    for cid in (halted, other):
        wait_for(pipeline_ended(tracker, cid), timeout=60, what="the courses to end")
    stopped = tracker.pipeline(halted)
    assert stopped.state == "halted"
    last = stopped.jobs[-1]
    assert last.idempotency_key == "module_exam:c2-m2"
    assert (last.status, last.attempts_made, last.error_type) == (
        JobStatus.FAILED,
        1,
        "CreditsExhausted",
    )
    assert len(stopped.jobs) == 5  # nothing after it
    assert tracker.pipeline(other).state == "completed"
    assert len(tracker.pipeline(other).jobs) == STEPS_OF_3


def test_a_fail_soft_step_that_exhausts_its_retries_lets_the_course_complete(
    env: Any, courses: Any, course_worker: Any
) -> None:
    app, faults = courses
    from example_project.courses.tasks import start

    faults.write_text("final_exam:c4=down\n")
    course_worker()
    cid = start("c4", 1)
    tracker = Tracker.for_app(app)
    wait_for(pipeline_ended(tracker, cid), timeout=60, what="the course to end")
    pipeline = tracker.pipeline(cid)
    assert pipeline.state == "completed"
    final = next(j for j in pipeline.jobs if j.idempotency_key == "final_exam:c4")
    assert (final.status, final.attempts_made) == (JobStatus.FAILED, 3)
    mastery = pipeline.children(final.id)
    assert [j.idempotency_key for j in mastery] == ["mastery_analysis:c4"]
    assert tracker.wait(mastery[0].id)["with_final_exam"] is False
    assert pipeline.counts == {**pipeline.counts, "completed": 4, "failed": 1}
    # the AI is back, but the course went on from that failure: the step is not run again
    # (issue 12, item 4: that would run both of its branches)
    faults.write_text("")
    with pytest.raises(RetryRefused, match=f"fail-soft successor {mastery[0].id}"):
        tracker.retry(final.id)
    again = tracker.pipeline(cid)
    assert [(j.id, j.status) for j in again.jobs] == [(j.id, j.status) for j in pipeline.jobs]


def test_within_a_course_no_steps_overlap_across_courses_they_do(
    env: Any, courses: Any, course_worker: Any
) -> None:
    app, _ = courses
    from example_project.courses.tasks import start

    # seed 000's settings, by their own names: AI calls 100 ms apart, 2 courses at a time
    seed: dict[str, str | None] = {
        "CELERY_TRACKED_RATE_LIMIT_MS": None,
        "JOB_QUEUE_COURSE_GEN_LIMITER_MS": "100",
        "JOB_QUEUE_COURSE_GEN_CONCURRENCY": "2",
        "COURSE_AI_LATENCY_MS": "150",
    }
    course_worker("a", concurrency=2, **seed)
    course_worker("b", concurrency=2, **seed)
    cids = [start("c5", 2), start("c6", 2), start("c11", 2)]
    tracker = Tracker.for_app(app)
    for cid in cids:
        wait_for(pipeline_ended(tracker, cid), timeout=120, what="the courses to end")
    spans = {}
    for cid in cids:
        got = [(r.started_at, r.finished_at) for r in rows(env, cid)]
        assert tracker.pipeline(cid).state == "completed"
        ordered = sorted(got)
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(ordered)), ordered
        spans[cid] = ordered
    overlaps = sum(
        1
        for one, other in itertools.combinations(cids, 2)
        for a in spans[one]
        for b in spans[other]
        if a[0] < b[1] and b[0] < a[1]
    )
    print("steps of different courses running at the same time:", overlaps)
    assert overlaps > 0, "different courses advance in parallel"
    every = sorted(span for ordered in spans.values() for span in ordered)
    changes = sorted([(a, 1) for a, _ in every] + [(b, -1) for _, b in every])
    at_once = max(itertools.accumulate(change for _, change in changes))
    assert at_once <= 2, "JOB_QUEUE_COURSE_GEN_CONCURRENCY: at most 2 steps at once"
    starts = [begun for begun, _ in every]
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(starts)]
    print("smallest gap between course steps' claims:", min(gaps))
    assert min(gaps) >= 0.09, "JOB_QUEUE_COURSE_GEN_LIMITER_MS spaces the AI steps"


def test_a_step_killed_after_declaring_its_successor_creates_it_once(
    env: Any, courses: Any, course_worker: Any
) -> None:
    """SIGKILL of the pool child while module_lessons runs (its exam already declared):
    after the redelivery, one exam row, one message, one execution."""
    app, faults = courses
    from example_project.courses.tasks import start

    faults.write_text("module_lessons:c7-m1=hang\n")
    course_worker()
    cid = start("c7", 1)
    tracker = Tracker.for_app(app)

    def lessons() -> Any:
        found = [j for j in tracker.pipeline(cid).jobs if j.idempotency_key.startswith("module_l")]
        return found[0] if found and found[0].status is JobStatus.PROCESSING else None

    wait_for(lambda: lessons() is not None, timeout=30, what="module_lessons to run")
    job = lessons()
    pid = int(job.locked_by.rsplit(":", 1)[1])
    os.kill(pid, signal.SIGKILL)
    faults.write_text("")
    wait_for(pipeline_ended(tracker, cid), timeout=60, what="the course to end")
    pipeline = tracker.pipeline(cid)
    assert pipeline.state == "completed"
    exams = [j for j in pipeline.jobs if j.idempotency_key == "module_exam:c7-m1"]
    assert len(exams) == 1 and started_events(env, exams[0].id) == 1
    lesson = tracker.get_job(job.id)
    assert lesson is not None and lesson.attempts_made == 2
    assert len(pipeline.jobs) == 1 + 1 + 1 + 1 + 1


def test_a_refused_completion_creates_no_successor_until_its_retry(
    env: Any, courses: Any, course_worker: Any
) -> None:
    """The step's completion write fails (the database refuses it): no successor row nor
    message; the step is retried, and then its successor exists exactly once."""
    app, _ = courses
    from example_project.courses.tasks import start

    engine = create_engine(env.database_url, poolclass=NullPool)
    with engine.begin() as conn:
        conn.execute(
            text(
                "CREATE FUNCTION refuse_outline() RETURNS trigger AS $$ BEGIN "
                "IF NEW.status = 'completed' AND NEW.idempotency_key = 'outline:c8' "
                "AND NEW.attempts_made = 1 THEN RAISE EXCEPTION 'refused by the test' "
                "USING ERRCODE = 'check_violation'; END IF; RETURN NEW; END $$ LANGUAGE plpgsql"
            )
        )
        conn.execute(
            text(
                "CREATE TRIGGER refuse_outline BEFORE UPDATE ON background_jobs "
                "FOR EACH ROW EXECUTE FUNCTION refuse_outline()"
            )
        )
    engine.dispose()
    course_worker()
    cid = start("c8", 1)
    tracker = Tracker.for_app(app)
    wait_for(pipeline_ended(tracker, cid), timeout=60, what="the course to end")
    pipeline = tracker.pipeline(cid)
    outline = pipeline.jobs[0]
    assert outline.attempts_made == 2
    events = [e.event for e in tracker.history(outline.id)]
    assert events[:4] == ["enqueued", "started", "retrying", "started"], events
    lessons = [j for j in pipeline.jobs if j.parent_job_id == outline.id]
    assert len(lessons) == 1
    assert pipeline.state == "completed" and len(pipeline.jobs) == 5


def test_a_worker_killed_between_the_commit_and_the_publish_is_relayed(
    env: Any, courses: Any, course_worker: Any
) -> None:
    app, _ = courses
    from example_project.courses.tasks import start

    course_worker(COURSES_TEST_KILL_AFTER="courses.outline")
    cid = start("c9", 1)
    tracker = Tracker.for_app(app)
    wait_for(lambda: len(tracker.pipeline(cid).jobs) == 2, timeout=30, what="the successor row")
    lessons = tracker.pipeline(cid).jobs[1]
    assert lessons.published_at is None
    time.sleep(1.2)  # the relay's grace period
    report = tracker.relay()
    assert report.published == [lessons.id]
    wait_for(pipeline_ended(tracker, cid), timeout=60, what="the course to end")
    pipeline = tracker.pipeline(cid)
    assert pipeline.state == "completed" and len(pipeline.jobs) == 5
    assert started_events(env, lessons.id) == 1
    assert [e.event for e in tracker.history(lessons.id)][:2] == ["enqueued", "relayed"]


def test_the_cli_prints_the_pipeline_as_a_tree(env: Any, courses: Any, course_worker: Any) -> None:
    app, _ = courses
    from example_project.courses.tasks import start

    course_worker()
    cid = start("c10", 1)
    tracker = Tracker.for_app(app)
    wait_for(pipeline_ended(tracker, cid), timeout=60, what="the course to end")
    out = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "courses_worker", "tracked", "pipeline", cid],
        cwd=str(HERE),
        env=worker_environ(env.config, None, {"CELERY_TRACKED_REDIS_URL": env.config["redis_url"]}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == f"pipeline {cid}: completed (completed 5)"
    assert [line.split("└─ ")[1].split()[0] for line in lines[1:]] == [
        "courses.outline",
        "courses.module_lessons",
        "courses.module_exam",
        "courses.final_exam",
        "courses.mastery_analysis",
    ]
    assert lines[2].startswith("   └─") and lines[5].startswith("            └─")
    missing = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "courses_worker", "tracked", "pipeline", "nope"],
        cwd=str(HERE),
        env=worker_environ(env.config, None, {"CELERY_TRACKED_REDIS_URL": env.config["redis_url"]}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 1 and "no job with correlation id nope" in missing.stderr


def test_a_step_whose_connections_are_terminated_mid_body_creates_its_successor_once(
    env: Any, courses: Any, course_worker: Any
) -> None:
    """``pg_terminate_backend`` of the worker's connections while module_lessons runs (its
    exam declared): the completion is re-sent on a new connection with the exam's row in the
    same transaction; one exam row, one run, and the step used one attempt."""
    app, faults = courses
    from example_project.courses.tasks import start

    faults.write_text("module_lessons:c12-m1=hang\n")
    course_worker()
    cid = start("c12", 1)
    tracker = Tracker.for_app(app)

    def running() -> bool:
        jobs = tracker.pipeline(cid).jobs
        return len(jobs) == 2 and jobs[1].status is JobStatus.PROCESSING

    wait_for(running, timeout=30, what="module_lessons to run")
    terminated = terminate_worker_connections(env.database_url)
    assert terminated, "no database connection of the worker was found"
    faults.write_text("")
    wait_for(pipeline_ended(tracker, cid), timeout=60, what="the course to end")
    pipeline = tracker.pipeline(cid)
    assert pipeline.state == "completed" and len(pipeline.jobs) == 5
    lessons = pipeline.jobs[1]
    assert lessons.attempts_made == 1
    exams = pipeline.children(lessons.id)
    assert len(exams) == 1 and started_events(env, exams[0].id) == 1
