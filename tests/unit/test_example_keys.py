"""The example service's keys: scoped per caller, never two tuples on one key."""

from __future__ import annotations

from example_project.service.keys import MAX_STORED, rate_key, scoped_key


def test_components_with_a_colon_never_collide() -> None:
    assert scoped_key("acme", "key", "x:1") != scoped_key("acme:x", "key", "1")
    assert scoped_key("a", "key", "ocr:d") != scoped_key("a", "ocr", "d")
    assert scoped_key("alice", "key", "welcome-1") == "alice:key:welcome-1"
    assert rate_key("a:1", 5) != rate_key("a", 1) and ":" not in rate_key("a:b", 1)[13:-2]


def test_a_long_key_is_a_digest_that_fits_the_column() -> None:
    long = scoped_key("u" * 255, "key", ":" * 200)
    assert long.startswith("h:") and len(long) <= MAX_STORED
    assert long != scoped_key("u" * 255, "key", ":" * 199)
