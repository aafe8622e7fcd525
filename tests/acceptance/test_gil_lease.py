"""Issue 22, item 10: a body that holds the GIL for most of its lease (one long C call)
keeps the renewal thread from running, not its lease: after the call returns, the run
tries one fenced renewal before it stops itself, finds its lease intact, and goes on. It
used to be killed (``SIGKILL``) right after the call returned, and run again although its
lease had not expired and nobody had taken it over.

A real worker (prefork, and solo: the body in the worker's own main process); a body
holding the GIL in one C call (libc's ``usleep`` through ``ctypes.PyDLL``): a ticking
thread in the body proves no other thread ran meanwhile.
"""

from __future__ import annotations

from typing import Any

import pytest

from celery_tracked.services.lease import PROOF_SHARE

LEASE_S = 4.0


@pytest.mark.parametrize("lease_seconds", [LEASE_S])
@pytest.mark.parametrize("pool", ["prefork", "solo"])
def test_a_body_holding_the_gil_for_most_of_its_lease_is_not_stopped(
    env: Any, start_worker: Any, lease_seconds: float, pool: str
) -> None:
    worker = start_worker(pool=pool)
    seconds = 0.95 * LEASE_S  # past the proof window (3/4), within the lease
    job_id = env.task("acc.hold_gil").enqueue(seconds=seconds).job_id
    job = env.wait_status(job_id, "completed", "failed", timeout=60)
    outcome = job.result or {}
    log = worker.log()
    assert "cannot prove its lease" not in log, log[-3000:]
    assert job.status.value == "completed", f"{env.diagnose(job_id)}\n{log[-3000:]}"
    assert env.ran(job_id) == 1
    assert outcome["run"] == 1 and job.attempts_made == 1
    # the GIL was really held past the proof window: no tick of the other thread
    assert outcome["gap"] >= PROOF_SHARE * LEASE_S, outcome
