"""docs/configuration.md documents every setting the code reads (issue 16).

Each field of :class:`Settings` is read as ``app.conf.tracked_<name>`` and
``CELERY_TRACKED_<NAME>`` (``Settings.from_conf``): each must have its row in the page's
table, with both names and the code's default; and the table names no setting the code
does not read.
"""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

from celery_tracked import Settings

PAGE = Path(__file__).parents[2] / "docs" / "configuration.md"
ROW = re.compile(r"^\| `tracked_(\w+)` \| `(CELERY_TRACKED_\w+)`[^|]* \| ([^|]+) \|", re.M)


def table() -> dict[str, tuple[str, str]]:
    """``{name: (environment variable, default)}`` of the page's first table."""
    section = PAGE.read_text().split("\n## ")[0]  # the table before the first section
    return {name: (env, default.strip()) for name, env, default in ROW.findall(section)}


def documented_default(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, tuple):
        return ", ".join(value)
    return str(value)


def test_every_setting_and_its_environment_variable_is_in_the_configuration_reference() -> None:
    rows = table()
    names = [f.name for f in fields(Settings)]
    missing = [f"tracked_{name}" for name in names if name not in rows]
    assert not missing, f"settings missing from docs/configuration.md: {missing}"
    stale = sorted(set(rows) - set(names))
    assert not stale, f"docs/configuration.md documents settings the code lacks: {stale}"
    for name in names:
        assert rows[name][0] == f"CELERY_TRACKED_{name.upper()}", name


def test_the_documented_defaults_are_the_codes() -> None:
    rows = table()
    for field in fields(Settings):
        if field.name == "redis_url":  # no default: required
            assert rows[field.name][1] == "none: **required**"
            continue
        if field.name == "secret_key":  # no default: off
            assert rows[field.name][1] == "none: off"
            continue
        default = rows[field.name][1].strip("`").lower()
        assert default == documented_default(field.default).lower(), field.name
