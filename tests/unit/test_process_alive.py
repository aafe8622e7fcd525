import os
import subprocess
import sys

from celery_tracked.services.lease import process_alive

from ..conftest import wait_for


def test_live_zombie_and_reaped_processes() -> None:
    assert process_alive(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    # not reaped yet: a zombie counts as dead (a SIGKILLed pool child before its reaping)
    wait_for(lambda: not process_alive(child.pid), timeout=10, what="child exit")
    child.wait()
    assert not process_alive(child.pid)
