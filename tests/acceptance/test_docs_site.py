"""The documentation site (mkdocs.yml) builds with no warning, and covers the public API.

``mkdocs build --strict`` fails on a broken link or anchor, a page missing from the nav, and
a docstring mkdocstrings cannot parse; ``make check`` runs it too.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import celery_tracked
import celery_tracked.errors

ROOT = Path(__file__).resolve().parents[2]


#: ``make docs`` writes the strict build's output here after a successful build.
BUILD_LOG = ROOT / "site" / "build.log"


def fresh_site() -> tuple[Path, str] | None:
    """The site ``make docs`` built (``make check`` runs it before ``make test``) and its
    build output, when it is newer than every source it was built from; else None."""
    if not BUILD_LOG.exists():
        return None
    sources = [ROOT / "mkdocs.yml", *ROOT.glob("docs/**/*"), *ROOT.glob("celery_tracked/**/*.py")]
    newest = max(p.stat().st_mtime for p in sources if p.is_file())
    if BUILD_LOG.stat().st_mtime < newest:
        return None
    return BUILD_LOG.parent, BUILD_LOG.read_text()


def test_the_docs_build_strict_and_the_api_page_has_every_public_name(tmp_path: Path) -> None:
    found = fresh_site()  # the same strict build, not run twice in one CI run
    if found is not None:
        site, output = found
    else:
        site = tmp_path / "site"
        done = subprocess.run(
            [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
            cwd=str(ROOT),
            env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
            capture_output=True,
            text=True,
            timeout=180,
        )
        output = done.stdout + done.stderr
        assert done.returncode == 0, output
    assert "WARNING" not in output, output
    api = (site / "api" / "index.html").read_text()
    documented = set(re.findall(r'id="celery_tracked\.(?:errors\.)?(\w+)"', api))
    public = {name for name in celery_tracked.__all__ if not name.startswith("_")}
    public |= set(celery_tracked.errors.__all__)  # documented as celery_tracked.errors.X
    assert public - documented == set()
    assert 'class="mermaid"' in (site / "concepts" / "index.html").read_text()


def build(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config)],
        cwd=str(config.parent),
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_an_orphan_page_or_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    """The strict build is strict: mkdocs.yml's own settings (without mkdocstrings, to be
    quick) on a copy of docs/ with a page missing from the nav, then a broken link."""
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs)
    config = tmp_path / "mkdocs.yml"
    config.write_text(
        f"INHERIT: {ROOT / 'mkdocs.yml'}\ndocs_dir: {docs}\nsite_dir: {tmp_path / 'site'}\n"
        "plugins: [search]\n"
    )
    (docs / "orphan.md").write_text("# Not in the nav\n")
    orphan = build(config)
    assert orphan.returncode == 1 and "orphan.md" in orphan.stderr, orphan.stderr
    (docs / "orphan.md").unlink()
    page = docs / "concepts.md"
    page.write_text(page.read_text() + "\nSee [nothing](missing.md#anchor).\n")
    broken = build(config)
    assert broken.returncode == 1 and "missing.md" in broken.stderr, broken.stderr


def test_the_readmes_links_to_the_docs_resolve() -> None:
    """README.md links to docs/*.md for GitHub readers: those files exist."""
    links = re.findall(r"\]\((docs/[^)#]+)", (ROOT / "README.md").read_text())
    assert links
    assert [link for link in links if not (ROOT / link).is_file()] == []


def test_the_sites_quick_start_is_the_readmes() -> None:
    """docs/index.md repeats README.md's first tracked job (the code blocks before its
    "Quick start (this repository)"): the same code, not a drifting copy."""
    readme = (ROOT / "README.md").read_text()
    first = readme.split("\n## Quick start (this repository)")[0]
    blocks = re.findall(r"```(?:python|sh)\n.*?```", first, re.S)
    assert len(blocks) >= 2
    index = (ROOT / "docs" / "index.md").read_text()
    assert [block for block in blocks if block not in index] == []
