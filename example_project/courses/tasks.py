"""The course-generation steps. Each one calls the AI and declares its successor.

One course is sequential (each step enqueues the next one when it completes), different
courses advance in parallel. Every step has the seed's idempotency key, so a step that
runs again never creates a second successor, and a course started twice is one course.
"""

from __future__ import annotations

from typing import Any

from celery_tracked import tracked_task

from . import ai

#: Attempts of every step (a provider outage is retried; credits exhaustion is not).
ATTEMPTS = 3
#: Seed 000's limits, shared by every step: the AI provider's calls are spaced
#: ``tracked_rate_limit_ms`` apart across all workers (``JOB_QUEUE_COURSE_GEN_LIMITER_MS``,
#: default 2000), and at most ``tracked_concurrency_limit`` course steps run at once
#: (``JOB_QUEUE_COURSE_GEN_CONCURRENCY``, default 2: how many courses advance in parallel).
LIMITS: dict[str, Any] = {"rate_limit_global": "ai-provider", "concurrency_key": "course_gen"}


def module_of(course_id: str, index: int) -> str:
    return f"{course_id}-m{index}"


@tracked_task(
    bind=True,
    name="courses.outline",
    idempotency_key="outline:{course_id}",
    max_attempts=ATTEMPTS,
    **LIMITS,
)
def outline(self: Any, course_id: str, modules: int) -> dict[str, Any]:
    text = ai.generate(f"outline:{course_id}", f"outline of {course_id} in {modules} modules")
    self.then(module_lessons, course_id, module_of(course_id, 1), 1, modules)
    return {"course_id": course_id, "outline": text}


@tracked_task(
    bind=True,
    name="courses.module_lessons",
    idempotency_key="module_lessons:{module_id}",
    max_attempts=ATTEMPTS,
    **LIMITS,
)
def module_lessons(
    self: Any, course_id: str, module_id: str, index: int, modules: int
) -> dict[str, Any]:
    # declared first: the exam exists only once this step completed, whenever it is declared
    self.then(module_exam, course_id, module_id, index, modules)
    step = f"module_lessons:{module_id}"
    lessons = [ai.generate(step, f"lesson {n} of {module_id}") for n in (1, 2, 3)]  # a batch
    return {"module_id": module_id, "lessons": len(lessons)}


@tracked_task(
    bind=True,
    name="courses.module_exam",
    idempotency_key="module_exam:{module_id}",
    max_attempts=ATTEMPTS,
    **LIMITS,
)
def module_exam(
    self: Any, course_id: str, module_id: str, index: int, modules: int
) -> dict[str, Any]:
    text = ai.generate(f"module_exam:{module_id}", f"exam of {module_id}")
    if index < modules:
        nxt = index + 1
        self.then(module_lessons, course_id, module_of(course_id, nxt), nxt, modules)
    else:
        self.then(final_exam, course_id)
    return {"module_id": module_id, "exam": text}


@tracked_task(
    bind=True,
    name="courses.final_exam",
    idempotency_key="final_exam:{course_id}",
    max_attempts=ATTEMPTS,
    **LIMITS,
)
def final_exam(self: Any, course_id: str) -> dict[str, Any]:
    # fail-soft: if the final exam cannot be made after all its attempts, the course still
    # gets its mastery analysis (without the final exam); never after credits ran out
    self.otherwise(mastery_analysis, course_id, with_final_exam=False)
    text = ai.generate(f"final_exam:{course_id}", f"final exam of {course_id}")
    self.then(mastery_analysis, course_id, with_final_exam=True)
    return {"course_id": course_id, "final_exam": text}


@tracked_task(
    bind=True,
    name="courses.mastery_analysis",
    idempotency_key="mastery_analysis:{course_id}",
    max_attempts=ATTEMPTS,
    **LIMITS,
)
def mastery_analysis(self: Any, course_id: str, with_final_exam: bool = True) -> dict[str, Any]:
    text = ai.generate(f"mastery_analysis:{course_id}", f"mastery analysis of {course_id}")
    return {"course_id": course_id, "analysis": text, "with_final_exam": with_final_exam}


def start(course_id: str, modules: int) -> str:
    """Start generating a course; returns the pipeline's correlation id (its first job)."""
    return outline.enqueue(course_id, modules).job_id
