"""securefl.protocols: cryptographic primitives wired into the FSSL steps.

Sans-I/O parties (dataclasses) plus in-process runners; numpy/scipy/faiss only, never
torch.  Export rule (every room): no module is named like a public name, so the functions
below cannot be shadowed by a submodule import (:func:`label_propagation` lives in
``propagation``, :func:`cross_client_lp` in ``crossclient``).

- :func:`label_propagation`: FedProp Algorithm 1 (dense or sparse solver).
- :func:`cross_client_lp`: FedProp Algorithm 3, real crypto or plaintext, dropouts.
- :func:`secure_hamming_matrix`: the all-pairs secure Hamming matrix (SHADE, LWE, ring-LWE),
  the deployed SecureHamming protocol driven in process (:mod:`securefl.protocols.hamming`);
  :func:`shade_pair`, :func:`shade_one_vs_many`, :func:`shade_distance`: its two-party SHADE
  session; :func:`lwe_pair`, :func:`lwe_one_vs_many`, :func:`lwe_distance`: its two-party LWE
  session.
- :mod:`securefl.protocols.lsh`: shared-seed random-hyperplane LSH.
- :mod:`securefl.protocols.prototype_sharing`: ProtoFSSL prototype exchange (loaded on
  first use: it pulls in ``dp_accounting``, which takes seconds to import).

:func:`cross_client_lp`, :class:`CrossClientLPResult` and :class:`Dropouts` load
:mod:`securefl.protocols.crossclient` on first use too: its client steps run the LWE
backend, whose exact products import torch (:mod:`securefl.crypto.linalg`).
"""

from __future__ import annotations

import importlib
from typing import Any

from securefl.protocols.lsh import agree_seed, cosine_from_hamming, hyperplanes, lsh_codes
from securefl.protocols.propagation import LabelPropagationResult, label_propagation

__all__ = [
    "CrossClientLPResult",
    "Dropouts",
    "LabelPropagationResult",
    "agree_seed",
    "cosine_from_hamming",
    "cross_client_lp",
    "hyperplanes",
    "label_propagation",
    "lsh_codes",
    "lwe_distance",
    "lwe_one_vs_many",
    "lwe_pair",
    "prototype_sharing",
    "secure_hamming_matrix",
    "shade_distance",
    "shade_one_vs_many",
    "shade_pair",
]


_MATRIX = ("secure_hamming_matrix", "shade_pair", "shade_one_vs_many", "shade_distance", "lwe_pair",
           "lwe_one_vs_many", "lwe_distance")
_CROSSCLIENT = ("CrossClientLPResult", "Dropouts", "cross_client_lp")


def __getattr__(name: str) -> Any:
    if name == "prototype_sharing":
        return importlib.import_module("securefl.protocols.prototype_sharing")
    if name in _MATRIX:
        return getattr(importlib.import_module("securefl.protocols.hamming.matrix"), name)
    if name in _CROSSCLIENT:
        return getattr(importlib.import_module("securefl.protocols.crossclient"), name)
    raise AttributeError(f"module 'securefl.protocols' has no attribute {name!r}")
