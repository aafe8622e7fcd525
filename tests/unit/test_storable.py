"""``storable``: text every database can hold (trial of issue 22, F1)."""

from __future__ import annotations

from celery_tracked.core.printable import storable, storable_params
from celery_tracked.core.redact import error_type, summarize


def test_lone_surrogates_and_nul_are_escaped_other_text_is_unchanged() -> None:
    assert storable("bad /tmp/x\udcff.pdf") == "bad /tmp/x\\udcff.pdf"
    assert storable("a\ud800b") == "a\\ud800b"
    assert storable("a\x00b") == "a\\x00b"
    assert storable("été ✓ \U0001f600") == "été ✓ \U0001f600"
    text = "plain ascii"
    assert storable(text) is text


def test_parameters_are_copied_only_when_a_text_changes() -> None:
    params = {"a": "x", "b": 1, "c": None, "d": "é"}
    assert storable_params(params) is params
    assert storable_params({"a": "x\udcff", "b": 1}) == {"a": "x\\udcff", "b": 1}
    assert storable_params(("a\x00", 2)) == ("a\\x00", 2)
    many = [{"m": "ok"}, {"m": "x\ud800"}]
    assert storable_params(many) == [{"m": "ok"}, {"m": "x\\ud800"}]


def test_the_error_summary_and_type_are_storable() -> None:
    assert summarize(ValueError("bad file /tmp/x\udcff.pdf")) == "bad file /tmp/x\\udcff.pdf"
    assert error_type(ValueError()) == "ValueError"
