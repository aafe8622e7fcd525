"""A child forked while a thread of its parent held the engines' creation lock (the
worker's time-limit thread creating the engines as the pool forks a replacement) creates
its own engines instead of waiting forever on the inherited lock."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from celery_tracked.store.engines import Engines


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_never_waits_on_a_lock_its_parent_held(tmp_path: Path) -> None:
    engines = Engines(f"sqlite:///{tmp_path / 'fork.db'}")
    engines.get()  # created in the parent
    assert engines._lock.acquire(timeout=1)  # a parent's thread holds it at the fork
    try:
        pid = os.fork()
        if pid == 0:  # the child: must create its own engines at once
            code = 1
            try:
                engines.get()
                code = 0
            finally:
                sys.stdout.flush()
                os._exit(code)
        deadline_s = 20
        for _ in range(deadline_s * 20):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.05)
        else:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the child waited on the inherited lock")
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        engines._lock.release()
