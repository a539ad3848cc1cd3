"""Griffe extension for the API reference: the docstrings' Sphinx roles become Markdown.

securefl's docstrings name other objects with Sphinx roles (``:func:`framing```,
``:class:`~securefl.crypto.ot.SenderSetup```, ``:mod:`securefl.fl.uploads```).  mkdocstrings
renders docstrings as Markdown, where a role would show as raw text, so each role becomes:

- a cross-reference, ``[`framing`][securefl.crypto.shade.framing]``, where the name
  resolves (in the scope of the object whose docstring it is, as Python would resolve it
  there) to an object of the API reference that the reference renders: public, documented,
  inside documented parents.  The strict build then fails if the reference does not exist.
- plain code, ``framing``, otherwise (a private helper, a name of numpy or torch).

``~`` shows the last component only, as in Sphinx.  Only docstrings change; the source does
not.
"""

from __future__ import annotations

import re
from typing import Any

from griffe import AliasResolutionError, CyclicAliasError, Extension, NameResolutionError, Object

ROLE = re.compile(r":(?:py:)?(?:func|class|mod|meth|attr|data|exc|obj|const):`(?P<tilde>~?)"
                  r"(?P<target>[\w.]+)(?:\(\))?`")


class SphinxRoles(Extension):
    """Rewrite every docstring of a package (securefl) once it is loaded."""

    def on_package(self, *, pkg: Object, **kwargs: Any) -> None:
        _rewrite(pkg, pkg)


def _rewrite(obj: Object, package: Object) -> None:
    if obj.docstring is not None:
        obj.docstring.value = ROLE.sub(lambda m: _replacement(m, obj, package),
                                       obj.docstring.value)
    for member in obj.members.values():
        if not member.is_alias and member.parent is obj:
            _rewrite(member, package)


def _replacement(match: re.Match, scope: Object, package: Object) -> str:
    target = match["target"]
    shown = target.rsplit(".", 1)[-1] if match["tilde"] else target
    path = _resolve(target, scope, package)
    return f"[`{shown}`][{path}]" if path else f"`{shown}`"


def _resolve(target: str, scope: Object, package: Object) -> str | None:
    """The path of the rendered object ``target`` names in ``scope``, or None."""
    head, _, rest = target.partition(".")
    candidates = []
    if head == package.name:
        candidates.append(target)
    try:
        resolved = scope.resolve(head)
        candidates.append(f"{resolved}.{rest}" if rest else resolved)
    except NameResolutionError:
        pass
    for candidate in candidates:
        found = _find(candidate, package)
        if found is not None and _rendered(found, package):
            return found.path
    return None


def _find(path: str, package: Object) -> Object | None:
    if path != package.name and not path.startswith(package.name + "."):
        return None
    obj = package
    for name in path.split(".")[1:]:
        member = obj.members.get(name)
        if member is None:
            return None
        if member.is_alias:
            try:
                member = member.final_target
            except (AliasResolutionError, CyclicAliasError):  # a target outside the package
                return None
        obj = member
    return obj


def _rendered(obj: Object, package: Object) -> bool:
    """Whether the API reference shows ``obj``: it and every parent below the package are
    public by name and documented."""
    while obj is not package:
        if obj.name.startswith("_") or not obj.has_docstring:
            return False
        if obj.parent is None:
            return False
        obj = obj.parent
    return True
