"""The docs site (``mkdocs.yml``) builds in strict mode: a broken link, anchor or API reference
fails the suite.  The site's home page is the README (``docs/hooks.py``), so the README's
links are checked with the pages' own; the API reference is generated from the docstrings."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None
    or importlib.util.find_spec("mkdocstrings_handlers") is None,
    reason="the docs extra is not installed (pip install -e '.[docs]')",
)


def _build(config: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
         "--site-dir", str(site)],
        check=False, capture_output=True, text=True, cwd=config.parent, timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )


def test_the_docs_site_builds_strictly(tmp_path):
    site = tmp_path / "site"
    done = _build(REPO / "mkdocs.yml", site)
    assert done.returncode == 0, done.stderr
    home = (site / "index.html").read_text()
    assert "Quick start" in home and 'href="security/"' in home  # the README, links rewritten
    crypto = (site / "api" / "crypto" / "index.html").read_text()
    assert "secure_hamming_matrix" in crypto and "ReceiverSession" in crypto  # from the docstrings
    assert 'href="#securefl.crypto.bits.transpose_bits"><code>transpose_bits</code>' in crypto
    assert not any(":func:`" in page.read_text() for page in (site / "api").rglob("*.html"))
    methods = (site / "methods" / "index.html").read_text()
    assert 'href="../api/methods/#securefl.methods.fedprop.server.FedProp"' in methods


def _small_site(tmp_path: Path, page: str, readme: str) -> Path:
    """A site with the repository's configuration (strictness, validation, hook, API
    handler) over one page and one README of the test's own."""
    import yaml  # mkdocs' own dependency

    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text(page)
    (tmp_path / "README.md").write_text(readme)
    (tmp_path / "figure.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "__init__.py").write_text(TINY)
    config.update(docs_dir="docs", hooks=[str(REPO / "docs" / "hooks.py")],
                  nav=[{"Home": "index.md"}, {"Page": "page.md"}])
    config.pop("theme")  # the built-in theme: faster, and the checks are the same
    handler = config["plugins"][1]["mkdocstrings"]["handlers"]["python"]
    handler["paths"] = [str(tmp_path)]
    handler["options"]["extensions"] = [str(REPO / "docs" / "griffe_roles.py")]
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    return tmp_path / "mkdocs.yml"


TINY = '''"""A package of the test's own (the API handler reads it, as it reads securefl)."""


class InputError(ValueError):
    """Bad input; see :func:`~tiny.check`, :class:`Missing` and :func:`_private`."""


def check(value: int) -> int:
    """Return ``value`` if it is positive."""
    return value


def _private() -> None:
    """Not in the reference."""
'''

GOOD_PAGE = """# Page

## Errors

::: tiny

[Home](index.md), [errors](#errors), [InputError][tiny.InputError],
![a figure](../figure.png)
"""


def test_the_configuration_accepts_good_links(tmp_path):
    config = _small_site(tmp_path, GOOD_PAGE, "# Home\n\n[The page](docs/page.md#errors)\n")
    done = _build(config, tmp_path / "site")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "site" / "repository" / "figure.png").is_file()
    page = (tmp_path / "site" / "page" / "index.html").read_text()
    assert 'src="../repository/figure.png"' in page and "Bad input" in page
    # the docstring's Sphinx roles: a link where the object is rendered, else code
    assert 'href="#tiny.check"><code>check</code></a>' in page
    assert "<code>Missing</code>" in page and "<code>_private</code>" in page
    assert ":func:" not in page and ":class:" not in page


def test_the_configuration_rejects_broken_links_anchors_and_references(tmp_path):
    page = GOOD_PAGE + """
[gone](gone.md), [no anchor](#no-such-section), [no object][tiny.NoSuchError],
![no figure](../no-such-figure.png)
"""
    config = _small_site(tmp_path, page, "# Home\n\n[gone too](docs/gone-too.md)\n")
    done = _build(config, tmp_path / "site")
    assert done.returncode != 0
    for broken in ("gone.md", "no-such-section", "tiny.NoSuchError",
                   "no-such-figure.png", "gone-too.md"):
        assert broken in done.stderr, broken
