"""The longest tests first, one at the head of each xdist worker's share.

``--dist worksteal`` gives each of the N workers a contiguous share of the collected
order (equal counts, in worker order) and lets an idle worker steal the tail of the
longest queue. In collection order the longest test of the acceptance tier (the README's
wheel, about 100 s) started near the end and finished alone. So the long tests are
dealt, longest first, into N shares of exactly those counts, each share longest first:
every worker starts with one of the longest tests, and the short ones fill in after.
Durations come from ``durations.json`` (seconds per test id, measured with
``--durations``; ``make test-durations`` writes it again); a test not in it is short.
Serial runs (no xdist) keep pytest's order. ``TEST_SHUFFLE=<seed>`` shuffles instead.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

DURATIONS = Path(__file__).with_name("durations.json")
#: a test this long or longer is started first (the others keep their order)
LONG_S = 8.0


def shares(count: int, workers: int) -> list[int]:
    """How many items worksteal's first distribution gives each worker, in order."""
    sizes, left = [], count
    for i in range(workers):
        sizes.append(left // (workers - i))
        left -= sizes[-1]
    return sizes


def longest_first(items: list[Any], seconds: dict[str, float], workers: int) -> list[Any]:
    """``items`` in the order that starts the long tests at once, spread over ``workers``.

    The long tests (``LONG_S`` or more), longest first, each to the share with the least
    long work so far (room allowing); then each share is filled with the next of the
    others in collection order (a module's short tests stay together, so its
    module-scoped fixtures are made once per share)."""
    if workers < 2 or len(items) < 2 * workers:
        return items
    long = sorted(
        (item for item in items if seconds.get(item.nodeid, 0.0) >= LONG_S),
        key=lambda item: -seconds[item.nodeid],
    )
    if not long:
        return items
    chosen = {id(item) for item in long}
    rest = iter([item for item in items if id(item) not in chosen])
    sizes = shares(len(items), workers)
    dealt: list[list[Any]] = [[] for _ in range(workers)]
    work = [0.0] * workers
    for item in long:
        share = min((i for i in range(workers) if len(dealt[i]) < sizes[i]), key=lambda i: work[i])
        dealt[share].append(item)
        work[share] += seconds[item.nodeid]
    for share, size in zip(dealt, sizes, strict=True):
        share.extend(next(rest) for _ in range(size - len(share)))
    return [item for share in dealt for item in share]


def reorder(items: list[Any]) -> None:
    """In an xdist worker: put ``items`` in the longest-first order (the same order in
    every worker, as xdist requires). With ``TEST_SHUFFLE=<seed>``: a shuffled order
    instead (the same seed, the same order; no test may depend on another's order)."""
    shuffle = os.environ.get("TEST_SHUFFLE")
    if shuffle:
        random.Random(shuffle).shuffle(items)
        return
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
    if workers < 2 or not DURATIONS.exists():
        return
    seconds = {str(k): float(v) for k, v in json.loads(DURATIONS.read_text()).items()}
    items[:] = longest_first(items, seconds, workers)


def durations_of(report: str) -> dict[str, float]:
    """Seconds per test id (setup, call and teardown added) from pytest's ``--durations``
    table, the tests of ``LONG_S / 2`` or more."""
    found: dict[str, float] = {}
    for line in report.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0].endswith("s") and "::" in parts[2]:
            try:
                took = float(parts[0][:-1])
            except ValueError:
                continue
            found[parts[2]] = found.get(parts[2], 0.0) + took
    return {k: round(v, 1) for k, v in sorted(found.items()) if v >= LONG_S / 2}


if __name__ == "__main__":  # make test-durations: pytest's report on stdin
    import sys

    DURATIONS.write_text(json.dumps(durations_of(sys.stdin.read()), indent=0) + "\n")
