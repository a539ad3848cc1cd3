"""Public exports cannot be shadowed by submodules, in any import order.

The rule every room follows: no module of a room is named like a public name of that
room.  ``from securefl.crypto import secure_sum`` used to give the *module* in a fresh
interpreter once a module of that name (``secure_sum.py`` in ``securefl/crypto/``) had been
imported by anyone (the function is now ``securefl.runtime.secure_sum``, in module
``securefl.runtime.summation``).
"""

from __future__ import annotations

import importlib
import itertools
import json
import pkgutil
import subprocess
import sys
import textwrap

import pytest

ROOMS = ("crypto", "runtime", "protocols", "fl", "methods", "models", "data", "experiments", "bench")


def public_names(room: str) -> set[str]:
    package = importlib.import_module(f"securefl.{room}")
    names = set(getattr(package, "__all__", ()))
    names |= set(getattr(package, "_EXPORTS", {}))
    return names


@pytest.mark.parametrize("room", ROOMS)
def test_no_module_is_named_like_a_public_name(room: str) -> None:
    package = importlib.import_module(f"securefl.{room}")
    modules = {info.name for info in pkgutil.iter_modules(package.__path__)}
    exported_modules = {"prototype_sharing"}  # exported on purpose as a module
    clashes = (public_names(room) - exported_modules) & modules
    assert not clashes, f"securefl.{room}: modules named like public names: {sorted(clashes)}"


# Each documented entry point: the import line and a call whose result is checked.
ENTRY_POINTS = {
    "secure_sum": (
        "from securefl.runtime import secure_sum",
        "r = secure_sum([np.arange(4, dtype=np.int64)] * 3, threshold=2, backend='plaintext');"
        " assert list(r.total) == [0, 3, 6, 9], r.total",
    ),
    "secure_hamming_matrix": (
        "from securefl.protocols import secure_hamming_matrix",
        "codes = [np.eye(3, 8, dtype=np.uint8), np.ones((2, 8), dtype=np.uint8)];"
        " r = secure_hamming_matrix(codes, backend='plaintext');"
        " assert r.matrix.shape == (5, 5) and r.matrix[0, 3] == 7, r.matrix",
    ),
    "label_propagation": (
        "from securefl.protocols import label_propagation",
        "t = 0.05 * np.arange(5); x = np.r_[np.c_[np.ones(5), t], np.c_[t, np.ones(5)]];"
        " y = np.full(10, -1); y[0] = 0; y[9] = 1;"
        " r = label_propagation(x, y, num_classes=2, k=3);"
        " assert list(r.pseudo_labels[:5]) == [0] * 5, r",
    ),
    "cross_client_lp": (
        "from securefl.protocols import cross_client_lp",
        "assert callable(cross_client_lp)"
        " and cross_client_lp.__module__ == 'securefl.protocols.crossclient.simulate'",
    ),
}

# Imports that used to shadow the function with its module when they ran first.
SHADOWING_IMPORTS = (
    "import securefl.runtime.summation",
    "import securefl.protocols.propagation",
    "import securefl.protocols.crossclient",
    "import securefl.crypto",
    "import securefl.protocols",
)


def run_fresh(code: str) -> None:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]


PRELOADED = ("numpy", "scipy.linalg", "scipy.sparse", "torch", "numba", "faiss", "tenseal",
             "cryptography.hazmat.primitives.asymmetric.x25519", "Crypto.Cipher.AES")
"""Third-party modules securefl's rooms import (what makes an interpreter slow to start)."""

FORK_SERVER = f"""
import importlib, json, os, sys, traceback
for name in {PRELOADED!r}:
    try:
        importlib.import_module(name)
    except ImportError:
        pass
loaded = [m for m in sys.modules if m.split(".")[0] in ("securefl", "tests")]
assert not loaded, loaded
for line in sys.stdin:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        os.dup2(2, 1)
        try:
            exec(compile(json.loads(line), "<fresh>", "exec"), {{"__name__": "__main__"}})
            status, message = 0, ""
        except BaseException:
            status, message = 1, traceback.format_exc()
        os.write(write, message.encode())
        os._exit(status)
    os.close(write)
    with os.fdopen(read) as pipe:
        message = pipe.read()
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    print(json.dumps({{"status": code, "error": message}}), flush=True)
"""
"""One interpreter that imports :data:`PRELOADED` and no securefl module, then forks a child
per case: each child starts with none of securefl imported (a fresh interpreter as far as
securefl's import order goes) without paying the third-party imports again."""


@pytest.fixture(scope="module")
def fresh():
    """``fresh(code)``: run ``code`` in a forked child of :data:`FORK_SERVER` (module
    docstring: no securefl module is imported before ``code``); assert it succeeded."""
    server = subprocess.Popen([sys.executable, "-c", FORK_SERVER], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)

    def run(code: str) -> None:
        server.stdin.write(json.dumps(code) + "\n")
        server.stdin.flush()
        line = server.stdout.readline()
        assert line, f"the fork server exited ({server.wait(timeout=10)})"
        reply = json.loads(line)
        assert reply["status"] == 0, reply["error"][-2000:]

    try:
        yield run
    finally:
        server.stdin.close()
        server.wait(timeout=60)


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
def test_entry_points_in_fresh_interpreters_and_orders(fresh, order: tuple[int, ...]) -> None:
    lines = ["import numpy as np"]
    lines += [SHADOWING_IMPORTS[i] for i in order]
    for import_line, call in ENTRY_POINTS.values():
        lines += [import_line, call, call]  # the second call used to raise TypeError
    lines += ["import securefl.crypto as c", "import securefl.protocols as p",
              "import securefl.runtime as r",
              "assert callable(r.secure_sum) and callable(p.secure_hamming_matrix)",
              "assert not hasattr(c, 'secure_hamming_matrix')",
              "assert not hasattr(c, 'secure_sum')",
              "assert callable(p.label_propagation) and callable(p.cross_client_lp)",
              "from securefl.data import partition; assert callable(partition)"]
    fresh("\n".join(lines))


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
def test_each_entry_point_first_thing_in_a_fresh_interpreter(fresh, name: str) -> None:
    import_line, call = ENTRY_POINTS[name]
    fresh(textwrap.dedent(f"""
        import numpy as np
        {import_line}
        {call}
        {call}
    """))


@pytest.mark.parametrize("room", ROOMS)
def test_every_public_name_resolves(room: str) -> None:
    package = importlib.import_module(f"securefl.{room}")
    for name in sorted(public_names(room)):
        value = getattr(package, name)
        assert value is not None, f"securefl.{room}.{name}"


def test_the_transports_and_a_client_app_that_does_not_train_do_not_import_torch() -> None:
    """The runtime room (every module: transport, driver, links, link-check, policy, the
    secure sums) and securefl.fl's uploads and Flower app import without torch
    (securefl.fl's exports are lazy); the first training name pulls it in."""
    import importlib.util

    flower = "import securefl.fl.flower.app" if importlib.util.find_spec("flwr") else "pass"
    run_fresh(textwrap.dedent(f"""
        import sys
        import securefl.fl
        from securefl.fl import uploads
        import pkgutil, importlib, securefl.runtime
        for info in pkgutil.walk_packages(securefl.runtime.__path__, "securefl.runtime."):
            importlib.import_module(info.name)
        from securefl.runtime import secure_sum
        {flower}
        assert "torch" not in sys.modules, "importing the transports imported torch"
        from securefl.fl import aggregate
        assert "torch" in sys.modules and callable(aggregate)
    """))
