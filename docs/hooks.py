"""MkDocs hook: the README is the site's home page, and pages may link to repository files.

- **Home page.** ``README.md`` becomes ``index.md``: its links into ``docs/`` drop that prefix
  (``docs/security.md`` -> ``security.md``) and its other relative links gain ``../``, so the
  strict build checks every README link as it checks the pages' own.
- **Repository files.** A page links to a file outside ``docs/`` by its path from the page
  (``../experiments/results/digits/digits-default-seeds.png``), the link that works when the
  Markdown is read in the repository.  Each such file that exists is copied into the site under
  ``repository/<path from the repository root>`` and the link is pointed at the copy; a link to
  a file that does not exist is left as it is, for the strict build to report.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

# the target of an inline Markdown link or image: ](target) or ](target "title")
LINK = re.compile(r"(?P<open>\]\()(?P<target>[^)\s#]+)(?P<rest>[^)]*\))")
COPIES = "repository"


def _repository(config: MkDocsConfig) -> tuple[Path, Path]:
    docs = Path(config.docs_dir).resolve()
    return docs, docs.parent


def _is_relative(target: str) -> bool:
    return not re.match(r"^[a-z][a-z0-9+.-]*:|^/", target)


def home_page(readme: str) -> str:
    """The README's text with its relative links rewritten for ``docs/index.md``."""

    def rewrite(match: re.Match) -> str:
        target = match["target"]
        if not _is_relative(target):
            return match[0]
        target = target[len("docs/"):] if target.startswith("docs/") else "../" + target
        return match["open"] + target + match["rest"]

    return LINK.sub(rewrite, readme)


def _outside_docs(page_path: Path, target: str, docs: Path, repo: Path) -> Path | None:
    """The repository file (outside ``docs/``) a relative link of a page points at, if any."""
    if not _is_relative(target) or not target.startswith("../"):
        return None
    path = (page_path.parent / target).resolve()
    if path.is_file() and repo in path.parents and docs not in path.parents:
        return path
    return None


def on_files(files: Files, config: MkDocsConfig) -> Files:
    docs, repo = _repository(config)
    home = home_page((repo / "README.md").read_text(encoding="utf-8"))
    files.append(File.generated(config, "index.md", content=home))
    for page in [f for f in files if f.is_documentation_page()]:
        text = page.content_string
        page_path = docs / page.src_uri
        for match in LINK.finditer(text):
            path = _outside_docs(page_path, match["target"], docs, repo)
            uri = f"{COPIES}/{path.relative_to(repo).as_posix()}" if path else None
            if uri and files.get_file_from_path(uri) is None:
                files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    docs, repo = _repository(config)
    page_path = docs / page.file.src_uri

    def rewrite(match: re.Match) -> str:
        path = _outside_docs(page_path, match["target"], docs, repo)
        if path is None:
            return match[0]
        uri = f"{COPIES}/{path.relative_to(repo).as_posix()}"
        here = posixpath.dirname(page.file.src_uri) or "."
        return match["open"] + posixpath.relpath(uri, here) + match["rest"]

    return LINK.sub(rewrite, markdown)
