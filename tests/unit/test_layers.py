"""The package's shape: no import circle (function-level and ``TYPE_CHECKING`` imports
included) and every module named in docs/architecture.md. The layer contracts themselves
are import-linter's (``pyproject.toml``, run by ``make check``)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "celery_tracked"


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Every module of the package ``name`` imports, wherever the import statement is."""
    base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base[: len(base) - (node.level - 1)]
                module = ".".join(anchor + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            subs = {f"{module}.{a.name}" for a in node.names} & known.keys()
            found.update(subs)
            if len(subs) < len(node.names) and module in known:
                found.add(module)
    found.discard(name)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_cycles_finds_a_circle_and_no_false_one() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_in_the_package() -> None:
    known = modules()
    graph = {name: imports_of(name, path, known) for name, path in known.items()}
    assert cycles(graph) == []


def test_every_module_is_in_the_architecture_page() -> None:
    page = (ROOT / "docs" / "architecture.md").read_text()
    missing = [
        str(path.relative_to(PACKAGE))
        for path in modules().values()
        if path.name != "__init__.py" and str(path.relative_to(PACKAGE)) not in page
    ]
    assert missing == []


def test_an_import_against_the_layers_breaks_the_contracts(tmp_path: Path) -> None:
    """``lint-imports`` (run by ``make check``) on a scratch copy of the package whose
    core imports the Celery adapter and Celery itself: both contracts fail."""
    import shutil
    import subprocess
    import sys

    shutil.copytree(PACKAGE, tmp_path / "celery_tracked")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    wrong = tmp_path / "celery_tracked" / "core" / "jobs.py"
    wrong.write_text(
        wrong.read_text() + "\nfrom ..adapter import task  # noqa\nimport celery  # noqa\n"
    )
    lint = Path(sys.executable).parent / "lint-imports"
    found = subprocess.run(
        [str(lint), "--config", "pyproject.toml", "--no-cache"],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert found.returncode != 0, found.stdout
    assert "Layers: adapter > facade > wiring > store, backends > services > core BROKEN" in (
        found.stdout
    )
    assert "Only the Celery adapter imports Celery BROKEN" in found.stdout


#: STYLE.md: a module reads on a screen or two
MAX_MODULE_LINES = 400


def test_no_module_of_the_package_is_over_400_lines() -> None:
    long = {
        str(path.relative_to(PACKAGE)): lines
        for path in PACKAGE.rglob("*.py")
        if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}, f"split these modules: {long}"
