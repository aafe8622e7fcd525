"""Issue 14 item 5: every public exception lives in ``errors.py``, and the tree drawn in its
docstring is the classes' true hierarchy."""

from __future__ import annotations

import importlib
import pkgutil
import re

import celery_tracked
from celery_tracked.core import errors

_NODE = re.compile(r"^(?P<indent>[ │]*)[├└]── (?P<name>\w+)")


def drawn() -> list[tuple[str, str]]:
    """``(parent, child)`` for every edge of the docstring's tree."""
    doc = errors.__doc__ or ""
    edges, stack = [], ["TrackedError"]
    for line in doc.splitlines():
        match = _NODE.match(line.strip("\n")[4:])
        if match is None:
            continue
        depth = len(match.group("indent")) // 4
        del stack[depth + 1 :]
        edges.append((stack[depth], match.group("name")))
        stack.append(match.group("name"))
    return edges


def test_the_docstring_tree_is_true() -> None:
    edges = drawn()
    assert len(edges) > 15
    for parent, child in edges:
        assert issubclass(getattr(errors, child), getattr(errors, parent)), (parent, child)
    public = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, errors.TrackedError)
    }
    assert public == {"TrackedError"} | {child for _, child in edges}


def test_every_public_exception_is_defined_in_errors() -> None:
    elsewhere = []
    for info in pkgutil.walk_packages(celery_tracked.__path__, "celery_tracked."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if not (isinstance(value, type) and issubclass(value, errors.TrackedError)):
                continue
            internal = name.startswith("_") or value.__dict__.get("internal", False)
            if value.__module__ == info.name != "celery_tracked.core.errors" and not internal:
                elsewhere.append(f"{info.name}.{name}")
    assert elsewhere == []
    assert celery_tracked.GuardError is errors.GuardError
    assert celery_tracked.NotInAStep is errors.NotInAStep
    assert celery_tracked.InvalidSuccessor is errors.InvalidSuccessor
