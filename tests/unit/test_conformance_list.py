"""The conformance tier's bookkeeping (tests/conformance/): its list of deliberate
differences is documented, and its table tells a regression from a deliberate or flaky
one."""

from __future__ import annotations

from pathlib import Path

from tests.conformance.report import Outcome, deliberate, node_id, read_junit, table

ROOT = Path(__file__).resolve().parent.parent.parent


def test_every_deliberate_difference_has_a_reason_and_is_in_converting_md() -> None:
    converting = (ROOT / "docs" / "converting.md").read_text()
    for test, reason in deliberate().items():
        assert test.startswith("t/integration/test_") and "::" in test
        assert len(reason.split()) >= 5, f"{test}: give the reason"
        assert f"`{test}`" in converting, f"{test} is not listed in docs/converting.md"


def test_junit_names_become_node_ids(tmp_path: Path) -> None:
    (tmp_path / "t" / "integration").mkdir(parents=True)
    (tmp_path / "t" / "integration" / "test_a.py").write_text("")
    junit = tmp_path / "run.xml"
    junit.write_text(
        "<testsuites><testsuite>"
        '<testcase classname="t.integration.test_a.test_cls" name="test_x[1]"/>'
        '<testcase classname="t.integration.test_a" name="test_y">'
        '<failure message="AssertionError: no&#10;more"/><error message="teardown"/>'
        "</testcase>"
        '<testcase classname="" name="t.integration.test_b"><error message="import"/>'
        "</testcase></testsuite></testsuites>"
    )
    assert node_id("t.integration.test_a.test_cls", "t", tmp_path) == (
        "t/integration/test_a.py::test_cls::t"
    )
    assert read_junit(junit, tmp_path) == {
        "t/integration/test_a.py::test_cls::test_x[1]": Outcome("passed"),
        "t/integration/test_a.py::test_y": Outcome("error", "teardown"),
        "t.integration.test_b": Outcome("error", "import"),
    }


def test_only_an_unlisted_confirmed_regression_fails_the_run() -> None:
    ok, bad = Outcome("passed"), Outcome("failed", "boom")
    plain = {"a": ok, "b": ok, "c": ok, "d": bad, "e": ok}
    tracked = {"a": bad, "b": bad, "c": bad, "d": ok, "e": ok}
    again = {"a": bad, "b": ok, "c": bad}
    text, unexpected = table(plain, tracked, again, {"c": "by choice"}, {}, "5.7.0")
    assert unexpected == ["a"]
    assert "passed plain, failed tracked: 3 (1 unexpected, 1 flaky, 1 deliberate)" in text
    assert "deliberate: by choice" in text
