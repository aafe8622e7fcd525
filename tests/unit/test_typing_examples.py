"""The typing examples (``tests/typing``), checked as typeshed and attrs check theirs.

``pass_*.py`` must pass ``mypy --strict``; each ``fail_*.py`` must fail, only on the lines
marked ``# expect: <error code>``, each with that code.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mypy import api

EXAMPLES = Path(__file__).parents[1] / "typing"
EXPECT = re.compile(r"#\s*expect:\s*([a-z-]+)")
ERROR = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+): error: .*\[(?P<code>[a-z-]+)\]$")


def _mypy(path: Path) -> tuple[int, list[tuple[int, str]]]:
    out, err, status = api.run(["--strict", "--no-error-summary", str(path)])
    assert not err, err
    errors = [(int(m["line"]), m["code"]) for m in map(ERROR.match, out.splitlines()) if m]
    assert status == 0 or errors, out  # a crash or a config error is not a typing error
    return status, errors


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("pass_*.py")), ids=lambda p: p.name)
def test_passes(path: Path) -> None:
    status, errors = _mypy(path)
    assert (status, errors) == (0, [])


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("fail_*.py")), ids=lambda p: p.name)
def test_fails_with_the_expected_error(path: Path) -> None:
    lines = path.read_text().splitlines()
    expected = {n: m[1] for n, line in enumerate(lines, 1) if (m := EXPECT.search(line))}
    assert expected, f"{path.name} marks no line with '# expect: <code>'"
    status, errors = _mypy(path)
    assert status == 1
    assert {line for line, _ in errors} == set(expected), errors
    for line, code in expected.items():
        assert code in {c for n, c in errors if n == line}, (line, code, errors)


def test_there_are_examples_of_both_kinds() -> None:
    assert list(EXAMPLES.glob("pass_*.py")) and len(list(EXAMPLES.glob("fail_*.py"))) >= 5
