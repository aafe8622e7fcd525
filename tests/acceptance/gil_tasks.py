"""Acceptance task of issue 22, item 10, added to ``tracked_app.create_app``'s app.

``acc.hold_gil`` holds the GIL in one C call (libc's ``usleep`` through ``ctypes.PyDLL``,
which keeps the GIL during the call, so no other thread of the process runs) for
``seconds``, then goes on for ``after`` seconds (sleeping: the other threads' turn)
and returns how long the call held, and the longest gap a ticking thread saw (the proof
that the GIL was held: no tick in between).
"""

from __future__ import annotations

import ctypes
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

from celery import Celery

from celery_tracked import tracked_task

#: libc through ``PyDLL``: its calls keep the GIL (``CDLL`` would release it).
_LIBC = ctypes.PyDLL(None)


def hold_the_gil(seconds: float) -> float:
    """Hold the GIL for ``seconds`` in one C call; return how long it held.

    A sleep, not a calibrated loop: a loop calibrated while the worker's other processes
    still started measured a slow CPU, and then held 2.2 s of the 3.8 s asked (CI)."""
    started = time.monotonic()
    _LIBC.usleep(int(seconds * 1_000_000))
    return time.monotonic() - started


def add_gil_tasks(
    app: Celery, queue: str, begin: Callable[[Any], Any], end: Callable[..., None]
) -> None:
    @tracked_task(app=app, bind=True, shared=False, name="acc.hold_gil", queue=queue)
    def hold_gil(self: Any, seconds: float, after: float = 1.0) -> dict[str, Any]:
        r, job_id, run, started = begin(self)
        ticks = [time.monotonic()]
        stop = threading.Event()

        def tick() -> None:
            while not stop.wait(0.02):
                ticks.append(time.monotonic())

        ticker = threading.Thread(target=tick, daemon=True)
        ticker.start()
        time.sleep(0.1)
        held = hold_the_gil(seconds)
        time.sleep(after)  # the body goes on after the call: the lease watchdog's turn
        stop.set()
        ticker.join()
        end(r, job_id, started)
        gap = max(b - a for a, b in itertools.pairwise(ticks))
        return {"run": run, "held": held, "gap": gap}
