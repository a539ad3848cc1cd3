"""securefl.runtime: how a protocol's parties exchange messages: records and transports,
the one step driver, typed state, node policy, and the secure-sum steps and backends.

Public names are resolved lazily (PEP 562) from the modules of this room, so importing
one module does not import them all; the other modules are imported by name.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    "secure_sum": "summation",
    "SecureSumResult": "summation",
    "SecureSumReport": "summation",
    "make_encoding": "summation",
}
"""Public name -> module of this room that defines it."""

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'securefl.runtime' has no attribute {name!r}")
    return getattr(importlib.import_module(f"securefl.runtime.{module}"), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
