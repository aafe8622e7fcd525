"""Deliberate differences: tests of Celery's ``t/integration`` suite that pass on plain
Celery and fail with ``TrackedTask`` by choice. ``make conformance`` accepts these, and
only these; each entry gives its reason, and docs/converting.md ("Celery's own test
suite") lists them too (``tests/unit/test_conformance_list.py`` checks that).

Keys are pytest node ids relative to the unpacked sdist (as the report prints them).
"""

from __future__ import annotations

DELIBERATE: dict[str, str] = {}
