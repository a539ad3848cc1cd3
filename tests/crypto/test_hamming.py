"""The secure Hamming entry point: every backend agrees on degenerate inputs, result or error."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from securefl.crypto.hamming import BACKENDS
from securefl.errors import InputError
from securefl.protocols import secure_hamming_matrix


def _outcome(codes, backend):
    """``("ok", matrix)`` or ``("error", type, parameter)``."""
    try:
        result = secure_hamming_matrix(codes, backend=backend, seed=0)
    except InputError as error:
        return ("error", type(error).__name__, error.parameter)
    return ("ok", result.matrix.tolist(), result.offsets)


@st.composite
def degenerate_codes(draw):
    """One party, one point, one bit, uneven splits — and a few invalid variants of them."""
    length = draw(st.sampled_from([1, 2, 3]))
    sizes = draw(st.sampled_from([[1], [2], [1, 1], [1, 3], [3, 1, 1]]))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    codes = [rng.integers(0, 2, size=(n, length), dtype=np.uint8) for n in sizes]
    defect = draw(st.sampled_from(["none", "none", "empty party", "zero length", "non-binary"]))
    if defect == "empty party":
        codes[-1] = codes[-1][:0]
    elif defect == "zero length":
        codes = [c[:, :0] for c in codes]
    elif defect == "non-binary":
        codes[0] = codes[0] + 2
    return codes


@settings(max_examples=8, deadline=None)
@given(codes=degenerate_codes())
def test_every_backend_gives_the_same_result_or_the_same_error(codes):
    assert BACKENDS == ("shade", "lwe", "rlwe", "plaintext")
    outcomes = {backend: _outcome(codes, backend) for backend in BACKENDS}
    assert outcomes["shade"] == outcomes["lwe"] == outcomes["rlwe"] == outcomes["plaintext"], outcomes
    if outcomes["plaintext"][0] == "ok":
        stacked = np.concatenate(codes).astype(np.int64)
        expected = (stacked[:, None, :] != stacked[None, :, :]).sum(axis=2)
        assert outcomes["plaintext"][1] == expected.tolist()


def _imports(module: str) -> list[tuple[str, bool]]:
    """``(imported module, inside a function)`` of every import in ``securefl.crypto.<module>``."""
    import ast
    import importlib.util

    tree = ast.parse(open(importlib.util.find_spec(f"securefl.crypto.{module}").origin).read())
    found = []

    def visit(node, nested):
        for child in ast.iter_child_nodes(node):
            inner = nested or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.ImportFrom) and child.module:
                found.append((child.module, inner))
            elif isinstance(child, ast.Import):
                found.extend((alias.name, inner) for alias in child.names)
            visit(child, inner)

    visit(tree, False)
    return found


def test_the_backends_do_not_import_the_cost_models_and_they_import_them_at_the_top():
    """No import circle between crypto/hamming.py (the backends' cost models) and the backends:
    they take what they share from hamming_shares, and hamming imports what it models at module
    level (no lazy import)."""
    for backend in ("shade", "shade_hops", "lwe", "lwe_hops", "lwe_keys", "rlwe", "ot", "hamming_shares"):
        assert "securefl.crypto.hamming" not in {name for name, _ in _imports(backend)}, backend
    entry = _imports("hamming")
    assert not [name for name, nested in entry if nested]
    assert "securefl.crypto.lwe" in {name for name, _ in entry}
