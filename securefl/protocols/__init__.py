"""securefl.protocols: cryptographic primitives wired into the FSSL steps.

Sans-I/O parties (dataclasses) plus in-process runners; numpy/scipy/faiss only, never
torch.  ``label_propagation`` and ``cross_client_lp`` are both submodules and the
functions they define; the imports below bind the package attributes to the functions.
Import module contents with ``from securefl.protocols.label_propagation import ...``
(``import securefl.protocols.label_propagation as m`` binds the function, not the module).

- :func:`label_propagation`: FedProp Algorithm 1 (dense or sparse solver).
- :func:`cross_client_lp`: FedProp Algorithm 3, real crypto or plaintext, dropouts.
- :mod:`securefl.protocols.lsh`: shared-seed random-hyperplane LSH.
- :mod:`securefl.protocols.prototype_sharing`: ProtoFSSL prototype exchange (loaded on
  first use: it pulls in ``dp_accounting``, which takes seconds to import).
"""

from __future__ import annotations

import importlib
from typing import Any

from securefl.protocols.cross_client_lp import CrossClientLPResult, Dropouts, cross_client_lp
from securefl.protocols.label_propagation import LabelPropagationResult, label_propagation
from securefl.protocols.lsh import agree_seed, cosine_from_hamming, hyperplanes, lsh_codes

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
    "prototype_sharing",
]


def __getattr__(name: str) -> Any:
    if name == "prototype_sharing":
        return importlib.import_module("securefl.protocols.prototype_sharing")
    raise AttributeError(f"module 'securefl.protocols' has no attribute {name!r}")
