"""What the CLI echoes of a value given or of job data is escaped: ``tracked pipeline``'s
header (the correlation id), ``tracked show``/``cancel``'s "no job" error, errors of the
filter options; an OSC title sequence, a screen clear and colour codes never reach the
terminal, on a TTY or off it (trial of issue 22, F4). In process, with click's runner."""

from __future__ import annotations

import types

import pytest
from click.testing import CliRunner

from celery_tracked import tracked_task
from celery_tracked.cli import tracked

from .conftest import AppFactory

EVIL = "c\x1b]0;pwned\x07\x1b[2J\x1b[31mall jobs completed\x1b[0m"


def _raw(output: str) -> bool:
    return "\x1b" in output or "\x07" in output


@pytest.mark.parametrize(
    "args",
    [
        ["pipeline", EVIL],
        ["show", EVIL],
        ["cancel", EVIL],
        ["jobs", "--created-after", EVIL],
    ],
)
def test_a_value_given_is_echoed_escaped(make_app: AppFactory, args: list[str]) -> None:
    app = make_app()

    @tracked_task(app=app, shared=False)
    def work(x: int) -> None: ...

    if args[0] == "pipeline":
        work.enqueue(1, _correlation_id=EVIL)
    out = CliRunner().invoke(tracked, args, obj=types.SimpleNamespace(app=app))
    assert not _raw(out.output), repr(out.output)
    assert "\\x1b]0;pwned\\x07" in out.output, out.output
