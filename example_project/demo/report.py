"""What the demo prints: live progress while the jobs run, then a table of the jobs, their
histories and one machine-readable line (``DEMO-RESULT {json}``) that tests parse."""

from __future__ import annotations

import json
import time
from typing import Any

from celery_tracked import Job, Tracker

from .story import Root, Verdict, jobs_of

#: How often the rows are read while the story runs, seconds.
POLL_S = 0.05
#: Marks the closing machine-readable line.
RESULT_MARK = "DEMO-RESULT"


def short(job_id: str) -> str:
    return job_id[:8]


def _line(job: Job, elapsed: float) -> str:
    attempts = f"{job.attempts_made}/{job.max_attempts}"
    stage = job.stage or ""
    error = f"  {job.error_type}" if job.error_type and not job.terminal else ""
    return (
        f"  {elapsed:5.1f}s  {short(job.id)}  {job.job_type:<24} {job.status.value:<10}"
        f" attempt {attempts:<4} {job.progress:3d}%  {stage}{error}"
    )


def watch(tracker: Tracker, roots: list[Root], counts: dict[str, int], timeout: float) -> bool:
    """Print each job's row whenever its status, attempts, progress or stage changes, until
    every group holds its jobs and all of them ended; False after ``timeout`` seconds."""
    print("\n== live progress (read from the rows)", flush=True)
    seen: dict[str, tuple[Any, ...]] = {}
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        done = True
        for root in roots:
            jobs = jobs_of(tracker, root)
            done = done and len(jobs) >= counts[root.job_id] and all(j.terminal for j in jobs)
            for job in jobs:
                state = (job.status, job.attempts_made, job.progress, job.stage)
                if seen.get(job.id) != state:
                    seen[job.id] = state
                    print(_line(job, time.monotonic() - start), flush=True)
        if done:
            return True
        time.sleep(POLL_S)
    print(f"  still running after {timeout:.0f} s", flush=True)
    return False


def table(found: list[Verdict]) -> None:
    print("\n== jobs", flush=True)
    header = f"  {'id':<8}  {'type':<24} {'status':<10} {'attempts':<8}  {'expected':<10} error"
    print(header)
    for v in found:
        job = v.job
        error = f"{job.error_type}: {job.error_message}" if job.error_type else ""
        mark = "" if v.ok else "  <-- NOT AS EXPECTED"
        print(
            f"  {short(job.id):<8}  {job.job_type:<24} {job.status.value:<10}"
            f" {job.attempts_made}/{job.max_attempts:<6}  {v.expected:<10} {error[:70]}{mark}"
        )


def pipeline(tracker: Tracker, root: Root) -> None:
    """The course as a tree (``tracker.pipeline(...).render()``, as ``tracked pipeline``)."""
    print("\n== the course's pipeline", flush=True)
    for line in tracker.pipeline(root.job_id).render().splitlines():
        print(f"  {line}")


def histories(tracker: Tracker, found: list[Verdict]) -> None:
    print("\n== histories", flush=True)
    for v in found:
        print(f"  {short(v.job.id)} {v.job.job_type} ({v.label.strip()})")
        for event in tracker.history(v.job.id):
            message = f"  {event.message}" if event.message else ""
            print(
                f"      {event.created_at:%H:%M:%S.%f}"[:-3]
                + f"  {event.event:<10} {event.status.value:<10} attempt {event.attempt}{message}"
            )


def result_line(mode: str, deduplicated: bool, finished: bool, found: list[Verdict]) -> bool:
    """Print ``DEMO-RESULT {json}``; returns whether everything went as expected."""
    ok = finished and deduplicated and bool(found) and all(v.ok for v in found)
    summary = {
        "ok": ok,
        "mode": mode,
        "finished": finished,
        "deduplicated": deduplicated,
        "jobs": [v.as_dict() for v in found],
    }
    print(f"\n{RESULT_MARK} {json.dumps(summary, sort_keys=True)}")
    print("\ndemo OK" if ok else "\ndemo FAILED", flush=True)
    return ok
