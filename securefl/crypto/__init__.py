"""securefl.crypto: cryptographic primitives (numpy, scipy, cryptography, pycryptodome; never torch).

Public names are resolved lazily from the modules of this room so that importing one
primitive does not import them all.
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
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'securefl.crypto' has no attribute {name!r}")
    return getattr(importlib.import_module(f"securefl.crypto.{module}"), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
