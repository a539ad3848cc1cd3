"""securefl.crypto: cryptographic primitives (numpy, scipy, cryptography, pycryptodome; torch only in
``linalg``, as the device-generic array library of the LWE backends' exact products).

Public names are resolved lazily from the modules of this room so that importing one
primitive does not import them all.  Export rule (every room): no module of a room is named
like a public name of that room, so a submodule import can never shadow a function
(``securefl.crypto.plaintext_hamming_matrix`` is the function; its module is
``securefl.crypto.hamming``).  The secure sum and the secure Hamming matrix, which run the
deployed protocol steps on a transport, are :func:`securefl.runtime.secure_sum` and
:func:`securefl.protocols.secure_hamming_matrix` (with its two-party sessions
:func:`securefl.protocols.shade_pair` and :func:`securefl.protocols.lwe_pair`), in the rooms above.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    "Message": "channel",
    "Network": "channel",
    "SERVER": "channel",
    "random_seed": "prg",
    "random_seeds": "prg",
    "expand": "prg",
    "expand_many": "prg",
    "HammingResult": "hamming",
    "plaintext_hamming_matrix": "hamming",
    "seconds_at_bandwidth": "projection",
    "random_ot": "ot",
    "OTSetups": "ot",
    "FixedPoint": "fixed_point",
    "encode_fixed_point": "fixed_point",
    "decode_fixed_point": "fixed_point",
    "SecAggClient": "secagg",
    "SecAggServer": "secagg",
    "SecAggConfig": "secagg",
    "plan_survivors": "secagg",
    "HEClient": "he",
    "HEServer": "he",
    "HEConfig": "he",
    "run_he": "he",
    "shamir_share": "shamir",
    "shamir_reconstruct": "shamir",
    "clip_rows": "dp",
    "gaussian_noise": "dp",
    "gaussian_mechanism": "dp",
    "PrivacyAccountant": "dp",
    "calibrate_sigma": "dp",
    "epsilon_for": "dp",
    "class_sum_sensitivity": "dp",
    "noised_class_sums": "dp",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'securefl.crypto' has no attribute {name!r}")
    return getattr(importlib.import_module(f"securefl.crypto.{module}"), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
