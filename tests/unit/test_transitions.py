"""Every status move is defined in one file, ``store/transitions.py``, and
``docs/lifecycle.md`` shows its table (from-statuses → to-status, fence, event per move),
generated from it: a test fails when the page's table differs.

``make lifecycle`` (``python -m tests.unit.test_transitions --write``) writes the table
into the page again.
"""

from __future__ import annotations

import pathlib
import re
import sys

from sqlalchemy import ColumnElement, literal_column, select
from sqlalchemy.dialects import sqlite

import celery_tracked
from celery_tracked.store import transitions
from celery_tracked.store.models import jobs
from celery_tracked.store.statements import Move

PACKAGE = pathlib.Path(celery_tracked.__file__).parent
PAGE = PACKAGE.parent / "docs" / "lifecycle.md"
BEGIN = "<!-- moves: generated from store/transitions.py by `make lifecycle`; do not edit -->"
END = "<!-- end of moves -->"
REGENERATE = "make lifecycle (python -m tests.unit.test_transitions --write)"


#: the database's clock (``clock.db_time``) as SQLite writes it, shown as ``db_now(offset)``
_NOW = re.escape("strftime('%Y-%m-%d %H:%M:%f000', 'now'")
_DIALECT = sqlite.dialect(paramstyle="named")


def _condition(element: ColumnElement[bool]) -> str:
    """A fence's condition as SQL, named parameters, ``db_now()`` for the database's clock."""
    # in a query on the jobs table, so that a correlated subquery reads as in the UPDATE
    query = select(literal_column("1")).select_from(jobs).where(element)
    compiled = query.compile(dialect=_DIALECT)
    text = re.split(r"\sWHERE\s", str(compiled), maxsplit=1)[1]
    for name, value in compiled.params.items():  # a literal (``status_1``) shows its value
        if re.fullmatch(r"\w+_\d+", name) and isinstance(value, str):
            text = re.sub(rf":{name}\b", f"'{value}'", text)
    text = re.sub(_NOW + r", \((.*?)\) \|\| ' seconds'\)", r"db_now(\1)", text)
    text = re.sub(_NOW + r"\)", "db_now()", text)
    text = re.sub(r"\s+", " ", text).replace("background_jobs.", "")
    return text.replace("|", "\\|")


def _statuses(statuses: tuple[object, ...]) -> str:
    return ", ".join(f"`{getattr(s, 'value', s)}`" for s in statuses)


def _target(move: Move) -> str:
    if move.target is not None:
        return f"`{move.target.value}`"
    return "(computed)" if "status" in move.values else "(unchanged)"


def table() -> str:
    """The state machine as a Markdown table, one row per move of ``transitions.MOVES``."""
    rows = [
        "| move | from | to | fence (besides `id` and the from-statuses) | event | durable |",
        "|---|---|---|---|---|---|",
    ]
    for move in transitions.MOVES:
        fence = " AND ".join(f"`{_condition(c)}`" for c in (*move.fence, *move.extra_where))
        event = f"`{move.event}`" if move.event else "(none)"
        durable = "yes" if move.durable else "no"
        sources = _statuses(move.sources)
        rows.append(
            f"| `{move.name}` | {sources} | {_target(move)} | {fence or '(none)'} | {event} "
            f"| {durable} |"
        )
    return "\n".join(rows) + "\n"


def _shown(page: str) -> str | None:
    if BEGIN not in page or END not in page:
        return None
    return page.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n") + "\n"


def test_print_the_state_machine() -> None:
    print(table())  # ``pytest -s`` shows it
    names = [move.name for move in transitions.MOVES]
    assert len(names) == len(set(names)), "two moves share a name"


def test_the_lifecycle_page_shows_every_move() -> None:
    shown = _shown(PAGE.read_text())
    assert shown == table(), (
        f"docs/lifecycle.md's table of moves differs from store/transitions.py: run {REGENERATE}"
    )


def test_every_move_is_defined_in_transitions() -> None:
    elsewhere = [
        path.name
        for path in (PACKAGE / "store").glob("*.py")
        if path.name != "transitions.py" and re.search(r"\bMove\(", path.read_text())
    ]
    assert elsewhere == [], f"a Move defined outside store/transitions.py: {elsewhere}"
    assert set(transitions.MOVES) == {
        value for value in vars(transitions).values() if isinstance(value, Move)
    } | set(transitions.UNDO_RETRY.values())


def _write() -> None:
    page = PAGE.read_text()
    if _shown(page) is None:
        raise SystemExit(f"{PAGE}: the markers {BEGIN!r} and {END!r} are missing")
    before, rest = page.split(BEGIN, 1)
    after = rest.split(END, 1)[1]
    PAGE.write_text(f"{before}{BEGIN}\n{table()}{END}{after}")


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        _write()
    else:
        sys.stdout.write(table())
