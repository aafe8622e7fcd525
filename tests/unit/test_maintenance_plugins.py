"""Adding a maintenance plugin is one file plus one line (issue 25, item 2).

The file: a :class:`~celery_tracked.services.maintenance.Maintenance` subclass (here
:class:`Toy`, kept in this test). The one line: its class in the wiring's list, in
``celery_tracked/wiring.py`` (with its import)::

    MAINTENANCE: tuple[type[Maintenance], ...] = (Relay, Reaper, Cleanup, Toy)

With it, and nothing else, the plugin is built once per tracker and gets a ``Tracker`` pass
(``run_maintenance("toy")``), the shared task ``celery_tracked.toy``, a default Beat entry
on its schedule and the command ``celery tracked toy``. The task and command loops run at
import (``adapter/beat.py``, ``cli/maintenance.py``): the check adds the line and re-runs
them (a reload) in a fresh interpreter, so this process's Celery registry (shared tasks
are announced to every app) and ``tracked`` group stay as they are.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import ClassVar

from celery_tracked.core.settings import Settings
from celery_tracked.services.maintenance import Maintenance, Parts

ROOT = Path(__file__).resolve().parents[2]


class ToyReport:
    def __init__(self, swept: list[str]) -> None:
        self.swept = swept

    def as_dict(self) -> dict[str, list[str]]:
        return {"swept": list(self.swept)}


class Toy(Maintenance):
    """A plugin that counts its passes (a stand-in for a reindexer or a gauge sampler)."""

    name: ClassVar[str] = "toy"
    summary: ClassVar[str] = "Sweep the toy corner: one pass."
    idle: ClassVar[str] = "nothing to sweep"

    def __init__(self, parts: Parts) -> None:
        self.parts = parts
        self.passes = 0

    @classmethod
    def schedule(cls, settings: Settings) -> float | None:
        return settings.reaper_interval_seconds * 3 or None  # a setting it reads

    @classmethod
    def build(cls, parts: Parts) -> Toy:
        return cls(parts)

    def run(self, now: datetime | None = None) -> ToyReport:
        self.passes += 1
        return ToyReport([f"pass {self.passes}"])


def check_in_a_fresh_process() -> None:
    """Add the one line, re-run the import-time loops, and check what appeared."""
    from celery import Celery
    from celery.bin.base import CLIContext
    from click.testing import CliRunner

    import celery_tracked.wiring as wiring
    from celery_tracked import Tracker, tracked_task
    from celery_tracked.adapter import beat
    from celery_tracked.cli import maintenance as commands
    from celery_tracked.cli import tracked

    wiring.MAINTENANCE = (*wiring.MAINTENANCE, Toy)  # the one line
    importlib.reload(beat)  # the loops, as at import
    importlib.reload(commands)

    app = Celery("toy", broker="memory://", set_as_current=False)
    app.conf.update(tracked_redis_url="memory://", tracked_reaper_interval_seconds=20)

    @tracked_task(app=app, shared=False, name="toy.work")
    def work() -> None: ...

    app.finalize()
    tracker = Tracker.for_app(app)
    plugin = tracker._services.maintenance["toy"]
    assert isinstance(plugin, Toy) and plugin.parts.platform is tracker._services.platform
    assert tracker.run_maintenance("toy").as_dict() == {"swept": ["pass 1"]}
    task = app.tasks["celery_tracked.toy"]
    assert task.ignore_result and not task.send_events and task.__doc__ == Toy.summary
    assert task.apply().get() == {"swept": ["pass 2"]}, "the same plugin: built once"
    entry = app.conf.beat_schedule["celery_tracked.toy"]
    assert (entry["task"], entry["schedule"]) == ("celery_tracked.toy", 60.0)
    assert "celery_tracked.relay" in app.conf.beat_schedule, "beside the others"
    context = CLIContext(app=app, no_color=True, workdir=None)
    out = CliRunner().invoke(tracked, ["toy", "--json"], obj=context, catch_exceptions=False)
    assert out.exit_code == 0 and json.loads(out.stdout) == {"swept": ["pass 3"]}, out.output
    table = CliRunner().invoke(tracked, ["toy"], obj=context, catch_exceptions=False)
    assert "pass 4" in table.stdout, table.output
    helped = CliRunner().invoke(tracked, ["toy", "--help"], obj=context)
    assert Toy.summary in helped.stdout, helped.output


def test_a_toy_plugin_is_one_file_plus_one_line() -> None:
    code = f"from {__name__} import check_in_a_fresh_process as c; c(); print('ok')"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr


def test_the_three_plugins_share_the_shape() -> None:
    """relay, schedule, reap, cleanup: one list, one name each through task, command and
    method."""
    from celery_tracked import Tracker
    from celery_tracked.adapter.beat import TASKS
    from celery_tracked.cli import tracked
    from celery_tracked.wiring import MAINTENANCE

    names = [plugin.name for plugin in MAINTENANCE]
    assert names == ["relay", "schedule", "reap", "cleanup", "probe"]
    assert set(TASKS) == set(names) and set(names) <= set(tracked.commands)
    assert all(callable(getattr(Tracker, name)) for name in names)
