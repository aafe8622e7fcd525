"""The conformance run's results: JUnit XML read per test, the deliberate differences
(``deliberate.py``) and the table of both runs."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from .deliberate import DELIBERATE

#: The worst of a test's JUnit children wins (a failing call and a failing teardown).
_RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}


@dataclass(frozen=True)
class Outcome:
    status: str  # passed, failed, error, skipped, missing
    message: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    @property
    def failed(self) -> bool:
        return self.status in ("failed", "error", "missing")


def node_id(classname: str, name: str, suite: Path) -> str:
    """``t.integration.test_canvas.test_chord`` + ``test_x[1]`` -> pytest's node id."""
    parts = classname.split(".") if classname else []
    for cut in range(len(parts), 0, -1):
        path = Path(*parts[:cut]).with_suffix(".py")
        if (suite / path).is_file():
            return "::".join([path.as_posix(), *parts[cut:], name])
    return f"{classname}::{name}" if classname else name  # a collection error: the module


def read_junit(junit: Path, suite: Path) -> dict[str, Outcome]:
    """Each test case of a JUnit file: its node id and outcome (missing file: none)."""
    if not junit.is_file():
        return {}
    outcomes: dict[str, Outcome] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        test = node_id(case.get("classname", ""), case.get("name", ""), suite)
        outcome = Outcome("passed")
        for child in case:
            status = {"failure": "failed", "error": "error", "skipped": "skipped"}.get(child.tag)
            if status and _RANK[status] > _RANK[outcome.status]:
                message = (child.get("message") or "").strip().splitlines()
                outcome = Outcome(status, message[0][:160] if message else "")
        previous = outcomes.get(test)
        if previous is None or _RANK.get(outcome.status, 0) > _RANK.get(previous.status, 0):
            outcomes[test] = outcome
    return outcomes


def deliberate() -> dict[str, str]:
    """The documented deliberate differences: node id -> reason."""
    return dict(DELIBERATE)


def table(
    plain: dict[str, Outcome],
    tracked: dict[str, Outcome],
    again: dict[str, Outcome],
    known: dict[str, str],
    seconds: dict[str, dict[str, float]],
    celery_version: str,
) -> tuple[str, list[str]]:
    """The table of both runs, its summary; and the unexpected regressions."""
    none = Outcome("missing")
    tests = sorted(set(plain) | set(tracked))
    width = max([len(t) for t in tests] + [4])
    lines = [f"{'test':<{width}}  {'plain':<8} {'tracked':<8} note"]
    unexpected: list[str] = []
    flaky: list[str] = []
    regressions: list[str] = []
    for test in tests:
        p, t = plain.get(test, none), tracked.get(test, none)
        note = ""
        if p.passed and t.failed:
            if test in known:
                note = "deliberate: " + known[test]
            elif test in again and again[test].passed:
                note = "FLAKY (passed when run again alone): " + t.message
                flaky.append(test)
            else:
                note = "REGRESSION: " + t.message
                unexpected.append(test)
            regressions.append(f"  {test}\n      {note}")
        elif p.status != t.status:
            note = f"plain: {p.message}" if p.failed else t.message
        lines.append(f"{test:<{width}}  {p.status:<8} {t.status:<8} {note}".rstrip())
    lines += ["", f"Celery {celery_version} t/integration, {len(tests)} tests"]
    for mode, results in (("plain", plain), ("tracked", tracked)):
        counts = {s: sum(1 for o in results.values() if o.status == s) for s in _RANK}
        summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
        lines.append(f"  {mode:<8} {summary} in {sum(seconds.get(mode, {}).values()):.0f} s")
    both = sum(1 for t in tests if plain.get(t, none).passed and tracked.get(t, none).passed)
    lines.append(f"  passed in both: {both}")
    lines.append(
        f"  passed plain, failed tracked: {len(regressions)} "
        f"({len(unexpected)} unexpected, {len(flaky)} flaky, "
        f"{len(regressions) - len(unexpected) - len(flaky)} deliberate)"
    )
    lines += regressions
    lines += ["", "seconds per file (plain, tracked):"]
    for path in sorted(seconds.get("plain", {})):
        took = [seconds.get(mode, {}).get(path, 0.0) for mode in ("plain", "tracked")]
        lines.append(f"  {path:<58} {took[0]:6.0f} {took[1]:6.0f}")
    stale = sorted(set(known) - set(tests))
    if stale:
        lines.append(f"  deliberate entries not run this time: {', '.join(stale)}")
    return "\n".join(lines) + "\n", unexpected
