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


@pytest.fixture(scope="module")
def report() -> tuple[int, list[tuple[str, int, str]]]:
    """One ``mypy --strict`` run over every example (one start-up and one cache load
    instead of nine): its status and its ``(file name, line, code)`` errors."""
    paths = sorted(str(p) for p in EXAMPLES.glob("*.py"))
    out, err, status = api.run(["--strict", "--no-error-summary", *paths])
    assert not err, err
    errors = [
        (Path(m["file"]).name, int(m["line"]), m["code"])
        for m in map(ERROR.match, out.splitlines())
        if m
    ]
    assert status == 0 or errors, out  # a crash or a config error is not a typing error
    return status, errors


def _mypy(
    path: Path, report: tuple[int, list[tuple[str, int, str]]]
) -> tuple[int, list[tuple[int, str]]]:
    """``path``'s status and errors, as a ``mypy --strict`` run of it alone would give (an
    error in a file that is not an example, the package's, counts for every example)."""
    examples = {p.name for p in EXAMPLES.glob("*.py")}
    errors = [
        (line, code) for name, line, code in report[1] if name == path.name or name not in examples
    ]
    return (1 if errors else 0), errors


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("pass_*.py")), ids=lambda p: p.name)
def test_passes(path: Path, report: tuple[int, list[tuple[str, int, str]]]) -> None:
    status, errors = _mypy(path, report)
    assert (status, errors) == (0, [])


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("fail_*.py")), ids=lambda p: p.name)
def test_fails_with_the_expected_error(
    path: Path, report: tuple[int, list[tuple[str, int, str]]]
) -> None:
    lines = path.read_text().splitlines()
    expected = {n: m[1] for n, line in enumerate(lines, 1) if (m := EXPECT.search(line))}
    assert expected, f"{path.name} marks no line with '# expect: <code>'"
    status, errors = _mypy(path, report)
    assert status == 1
    assert {line for line, _ in errors} == set(expected), errors
    for line, code in expected.items():
        assert code in {c for n, c in errors if n == line}, (line, code, errors)


def test_there_are_examples_of_both_kinds() -> None:
    assert list(EXAMPLES.glob("pass_*.py")) and len(list(EXAMPLES.glob("fail_*.py"))) >= 5
