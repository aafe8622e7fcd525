"""Pipeline status: the jobs that share a correlation id, as a tree, and their state.

``Tracker.pipeline(correlation_id)`` reads every job of the pipeline (one indexed query)
and :func:`pipeline_state` decides its overall state from the rows alone:

- ``running``: a job is ``pending``, ``processing`` or ``retrying``;
- ``completed``: nothing runs and every job no successor followed (a leaf) completed (a
  step that failed with its fail-soft successor run is not a leaf);
- ``failed``: nothing runs and a leaf failed after using up its retries (its
  ``retries_exhausted``: its last attempt raised an error its task retries, was lost, or
  was killed by the hard time limit);
- ``halted``: nothing runs and a leaf was stopped (``Unrecoverable``, an error its task
  does not retry, on any attempt) or cancelled: the pipeline was stopped on purpose.

Pure: no SQL here (the read is ``store/reads.py``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from .jobs import Job, JobStatus
from .printable import visible

RUNNING, COMPLETED, FAILED, HALTED = "running", "completed", "failed", "halted"


def pipeline_state(jobs: Sequence[Job]) -> str:
    """The overall state of a pipeline's jobs (see the module's text)."""
    if any(not job.terminal for job in jobs):
        return RUNNING
    parents = {job.parent_job_id for job in jobs}
    leaves = [job for job in jobs if job.id not in parents]
    if all(job.status is JobStatus.COMPLETED for job in leaves):
        return COMPLETED
    used_up = [job for job in leaves if job.status is JobStatus.FAILED and job.retries_exhausted]
    return FAILED if used_up else HALTED


@dataclass(frozen=True)
class Pipeline:
    """The jobs of one correlation id, oldest first, with their parent links."""

    correlation_id: str
    jobs: tuple[Job, ...]

    @property
    def state(self) -> str:
        return pipeline_state(self.jobs)

    @property
    def counts(self) -> dict[str, int]:
        """How many jobs are in each status (every status listed)."""
        seen = Counter(job.status.value for job in self.jobs)
        return {status.value: seen.get(status.value, 0) for status in JobStatus}

    def children(self, job_id: str | None) -> list[Job]:
        """The jobs whose parent is ``job_id`` (None: the roots: no parent in this
        pipeline)."""
        return list(self._children().get(job_id, ()))

    def _children(self) -> dict[str | None, list[Job]]:
        """Every job under its parent's id (the roots under None), oldest first; built once."""
        index: dict[str | None, list[Job]] | None = self.__dict__.get("_index")
        if index is None:
            ids = {job.id for job in self.jobs}
            index = {}
            for job in self.jobs:
                parent = job.parent_job_id if job.parent_job_id in ids else None
                index.setdefault(parent, []).append(job)
            object.__setattr__(self, "_index", index)  # a cache on a frozen dataclass
        return index

    def tree(self) -> Iterator[tuple[int, Job]]:
        """``(depth, job)`` in tree order (a parent, then its successors), each job once."""
        children = self._children()
        seen: set[str] = set()
        stack = [(0, job) for job in reversed(children.get(None, ()))]
        while stack:
            depth, job = stack.pop()
            if job.id in seen:
                continue
            seen.add(job.id)
            stack.extend((depth + 1, child) for child in reversed(children.get(job.id, ())))
            yield depth, job

    def render(self) -> str:
        """The pipeline as a tree, one job per line (never payloads): each job under its
        parent, its siblings joined by ``├─`` and the last one by ``└─``."""
        counts = ", ".join(f"{status} {n}" for status, n in self.counts.items() if n)
        lines = [visible(f"pipeline {self.correlation_id}: {self.state} ({counts})")]
        for branch, job in self._drawn():
            error = f"  {job.error_type}: {job.error_message}" if job.error_type else ""
            if job.status is JobStatus.COMPLETED:
                error = ""
            lines.append(
                branch
                + visible(
                    f"{job.job_type}  {job.status.value}  {job.id}  "
                    f"attempts {job.attempts_made}/{job.max_attempts}{error}"
                )
            )
        return "\n".join(lines)

    def _drawn(self) -> Iterator[tuple[str, Job]]:
        """``(branch, job)`` in tree order: ``branch`` draws the lines from the ancestors
        (``│`` where an ancestor has a later sibling) and ``├─``/``└─``; deeper than
        ``MAX_INDENT``, the depth in brackets instead of more indentation."""
        children = self._children()
        seen: set[str] = set()
        roots = children.get(None, ())
        stack = [("", i == len(roots) - 1, 0, job) for i, job in enumerate(roots)][::-1]
        while stack:
            prefix, last, depth, job = stack.pop()
            if job.id in seen:
                continue
            seen.add(job.id)
            mark = f"[{depth}] " if depth > MAX_INDENT else ""
            yield f"{prefix}{mark}{'└─' if last else '├─'} ", job
            under = prefix + ("   " if last else "│  ") if depth < MAX_INDENT else prefix
            kids = children.get(job.id, ())
            stack.extend(
                (under, i == len(kids) - 1, depth + 1, kid)
                for i, kid in reversed(list(enumerate(kids)))
            )


#: Deeper than this, a tree line shows its depth instead of indenting further (a chain of
#: 10,000 steps would otherwise print 150 million spaces).
MAX_INDENT = 24
