"""The layering of DESIGN.md's rooms holds: no import circle between modules and no import
from a room to a room above it, function-level (lazy) imports included.

Rooms, lowest first (a module may import from its own room and the rooms before it):

====  ====================================================  ==================================
rank  room                                                  one sentence
====  ====================================================  ==================================
0     ``errors``, ``progress``, ``machine``, ``memory``,    what every room may use
      ``output``, the package's ``__init__`` (its version)
1     ``crypto``                                            primitives (numpy, never torch)
2     ``runtime``                                           how a protocol's parties exchange
                                                            messages: records and transports,
                                                            the one step driver, typed state,
                                                            node policy, and the secure-sum
                                                            steps and backends
3     ``protocols``                                         primitives wired into FSSL steps
4     ``data``, ``models``                                  datasets and backbones
5     ``fl``                                                federated engine: sampling,
                                                            training, secure FedAvg, Flower
6     ``methods``                                           the FSSL methods' two halves
7     ``experiments``                                       configs, runner, results
8     ``bench``                                             benchmarks writing JSON
9     ``cli``, ``__main__``                                 the command line
====  ====================================================  ==================================

An import is an edge from the importing module to the module it names: ``import a.b`` and
``from a import b`` (``b`` a module) name ``a.b``; ``from a.b import name`` names ``a.b``
(for a package, its ``__init__``).  Parent packages that Python imports on the way are not
edges (no layering tool counts them), nor are imports under ``if TYPE_CHECKING:``, which
never run (annotations only).  A circle is a strongly connected set of modules.

:data:`KNOWN` lists the violations owned by work in progress elsewhere, each with who
removes it; any other violation fails, and so does an entry of :data:`KNOWN` that no longer
occurs (so that the list only shrinks).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "securefl"
ROOMS = {"errors": 0, "progress": 0, "machine": 0, "memory": 0, "output": 0, "__init__": 0, "crypto": 1,
         "runtime": 2, "protocols": 3, "data": 4, "models": 4, "fl": 5, "methods": 6,
         "experiments": 7, "bench": 8, "cli": 9, "__main__": 9}

KNOWN: set[tuple[str, ...]] = set()


def modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` under package folder ``root``."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that module ``name`` (file ``path``) imports, anywhere in it."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    typing_only = {id(inner) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
                   for statement in node.body for inner in ast.walk(statement)}
    targets = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                targets.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {t for t in targets if t in known and t != name}


def room(name: str) -> str:
    """The room of a dotted module name (its first part below the package)."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def circles(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """The strongly connected sets of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            members = []
            while True:
                member = stack.pop()
                members.append(member)
                if member == node:
                    break
            if len(members) > 1:
                found.append(tuple(sorted(members)))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def violations(root: Path, rooms: dict[str, int]) -> set[tuple[str, ...]]:
    """Every circle (``("circle", *modules)``) and upward import (``("upward", importer,
    imported)``) of the package in folder ``root``."""
    known = modules(root)
    graph = {name: imports(name, path, known) for name, path in known.items()}
    found: set[tuple[str, ...]] = {("circle", *c) for c in circles(graph)}
    for name, targets in graph.items():
        for target in targets:
            if rooms[room(target)] > rooms[room(name)]:
                found.add(("upward", name, target))
    return found


def test_every_module_is_in_a_room():
    assert {room(name) for name in modules(PACKAGE)} <= set(ROOMS)


def test_no_new_circle_and_no_new_upward_import():
    found = violations(PACKAGE, ROOMS)
    assert sorted(found - KNOWN) == []
    assert sorted(KNOWN - found) == [], "fixed: remove it from KNOWN"


def test_records_and_the_sum_backend_names_import_nothing_of_their_room():
    """The foundations the rest of ``securefl.runtime`` builds on (what keeps it free of
    circles): Records and the names a policy may allow import no module of the room."""
    known = modules(PACKAGE)
    for name in ("securefl.runtime.records", "securefl.runtime.sum_names"):
        inside = {t for t in imports(name, known[name], known) if room(t) == "runtime"}
        assert inside == set(), name


@pytest.fixture
def toy(tmp_path):
    """A package ``toy`` with rooms ``low`` < ``high``, a lazy circle in ``low`` and a lazy
    upward import from ``low`` to ``high``."""
    root = tmp_path / "toy"
    (root / "low").mkdir(parents=True)
    (root / "high").mkdir()
    files = {
        "__init__.py": "",
        "low/__init__.py": "",
        "low/a.py": "def f():\n    from toy.low import b\n",
        "low/b.py": "from . import a\n",
        "low/c.py": "def g():\n    import toy.high.d\n",
        "high/__init__.py": "",
        "high/d.py": "from toy.low.c import g\n",
        "low/e.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import toy.high.d\n",
    }
    for name, text in files.items():
        (root / name).write_text(text)
    return root


def test_the_check_finds_a_lazy_circle_and_a_lazy_upward_import(toy):
    found = violations(toy, {"__init__": 0, "low": 0, "high": 1})
    assert found == {("circle", "toy.low.a", "toy.low.b"),
                     ("circle", "toy.high.d", "toy.low.c"),
                     ("upward", "toy.low.c", "toy.high.d")}
    (toy / "low" / "c.py").write_text("def g():\n    pass\n")
    (toy / "low" / "a.py").write_text("")
    assert violations(toy, {"__init__": 0, "low": 0, "high": 1}) == set()
