"""What the demo enqueues, and what each of its jobs is expected to end as.

Every key carries the run's tag, so a second run against the same database (services
mode) tells its own story instead of finding the first run's jobs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from celery import Celery

from celery_tracked import Job, Tracker

#: Modules of the demo's course: outline, lessons + exam per module, final exam, analysis.
COURSE_MODULES = 2
COURSE_STEPS = 1 + 2 * COURSE_MODULES + 2


@dataclass(frozen=True)
class Root:
    """A job the story enqueued: ``label`` says what it shows, ``expected`` how it ends."""

    label: str
    job_id: str
    expected: str
    attempts: int | None = None


@dataclass(frozen=True)
class Verdict:
    """One job at the end, against what was expected of it."""

    label: str
    job: Job
    expected: str
    attempts: int | None

    @property
    def ok(self) -> bool:
        attempts_ok = self.attempts is None or self.job.attempts_made == self.attempts
        return self.job.status.value == self.expected and attempts_ok

    def as_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "id": self.job.id,
            "job_type": self.job.job_type,
            "status": self.job.status.value,
            "expected": self.expected,
            "attempts": self.job.attempts_made,
            "expected_attempts": self.attempts,
            "ok": self.ok,
        }


def say(text: str) -> None:
    print(f"  - {text}", flush=True)


def submit(app: Celery, tag: str) -> tuple[list[Root], bool]:
    """Enqueue the story; returns its root jobs and whether the duplicate was deduplicated."""
    tasks = app.tasks
    doc = f"doc-{tag}"
    first = tasks["demo.ocr"].enqueue(document_id=doc, pages=4)
    say(f"document {doc} submitted for OCR: job {first.job_id} (created={first.created})")
    again = tasks["demo.ocr"].enqueue(document_id=doc, pages=4)
    deduplicated = again.job_id == first.job_id and not again.created
    say(f"submitted again, same key ocr:{doc}: job {again.job_id} (created={again.created})")
    flaky = tasks["demo.fetch"].enqueue(url=f"https://upstream.example/{tag}")
    say(f"a fetch from a flaky upstream: job {flaky.job_id}")
    fails = tasks["demo.report"].enqueue(report_id=f"r-{tag}")
    say(f"a report whose warehouse never answers: job {fails.job_id}")
    broken = tasks["demo.import_file"].enqueue(file_id=f"f-{tag}.exe")
    say(f"an import of a file that is not a PDF: job {broken.job_id}")
    course = tasks["courses.outline"].enqueue(f"course-{tag}", COURSE_MODULES)
    say(f"a {COURSE_MODULES}-module course (a pipeline of {COURSE_STEPS} steps): {course.job_id}")
    roots = [
        Root("document OCR, then indexing", first.job_id, "completed", 1),
        Root("flaky fetch: retried, then completed", flaky.job_id, "completed", 2),
        Root("report: fails on every attempt", fails.job_id, "failed", 3),
        Root("import: Unrecoverable, failed at once", broken.job_id, "failed", 1),
        Root(f"course: {COURSE_MODULES} modules", course.job_id, "completed", 1),
    ]
    return roots, deduplicated


def jobs_of(tracker: Tracker, root: Root) -> list[Job]:
    """The root's job and every successor after it (they share its correlation id)."""
    jobs = tracker.jobs(correlation_id=root.job_id, limit=100).jobs
    if not any(job.id == root.job_id for job in jobs):
        found = tracker.get_job(root.job_id)
        jobs = [*jobs, *([found] if found is not None else [])]
    return sorted(jobs, key=lambda job: job.created_at)


def verdicts(tracker: Tracker, roots: list[Root]) -> list[Verdict]:
    """Every job of the story against its expectation: a successor is expected to end like
    its root (the course's steps and the indexing step all complete, in one attempt)."""
    found: list[Verdict] = []
    for root in roots:
        for job in jobs_of(tracker, root):
            label = root.label if job.id == root.job_id else f"  successor of {root.label}"
            attempts = root.attempts if job.id == root.job_id else 1
            found.append(Verdict(label, job, root.expected, attempts))
    return found


def expected_counts(roots: list[Root]) -> dict[str, int]:
    """How many jobs each root's group must hold once it ended (root id -> count)."""
    counts = {root.job_id: 1 for root in roots}
    counts[roots[0].job_id] = 2  # OCR and its indexing step
    counts[roots[-1].job_id] = COURSE_STEPS
    return counts
