"""Deliberate differences: tests of Celery's ``t/integration`` suite that pass on plain
Celery and fail with ``TrackedTask`` by choice. ``make conformance`` accepts these, and
only these; each entry gives its reason, and docs/converting.md ("Celery's own test
suite") lists them too (``tests/unit/test_conformance_list.py`` checks that).

Keys are pytest node ids relative to the unpacked sdist (as the report prints them).
"""

from __future__ import annotations

_ACKS_LATE = (
    "TrackedTask acknowledges its message after the body ends (acks_late=True, with "
    "reject_on_worker_lost): a worker that dies mid-job leaves the message to be "
    "redelivered and the job taken over, instead of lost. So a running job shows "
    "'acknowledged': False in inspect().active() and query_task() where Celery's default "
    "(early acknowledgement) shows True; an app that wants early acks sets acks_late=False "
    "and gives up that redelivery."
)

DELIBERATE: dict[str, str] = {
    "t/integration/test_inspect.py::test_Inspect::test_active": _ACKS_LATE,
    "t/integration/test_inspect.py::test_Inspect::test_query_task": _ACKS_LATE,
}
