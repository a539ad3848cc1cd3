"""securefl.runtime: how a protocol's parties exchange messages: records and transports,
the one step driver, typed state, node policy, and the secure-sum steps and backends.

Modules (each imported by name; the public names below are lazy, PEP 562, so importing
one module does not import them all):

* :mod:`~securefl.runtime.records` -- :class:`~securefl.runtime.records.Record` (what
  crosses or persists), protocol messages in Records, an exchange's outcome;
* :mod:`~securefl.runtime.transport` -- client and server halves, the node context, the
  transport interface and the in-process transport (Flower's is
  :mod:`securefl.fl.flower`);
* :mod:`~securefl.runtime.engine` -- the one driver of a server step table;
* :mod:`~securefl.runtime.state_codec` -- a protocol party's typed state in a Record;
* :mod:`~securefl.runtime.policy` -- a node's own privacy policy and DP ledger, and
  :mod:`~securefl.runtime.sum_names` the secure-sum backend names it may allow;
* :mod:`~securefl.runtime.links` and :mod:`~securefl.runtime.linkcheck` -- client-to-client
  links relayed by the server, authenticated end to end, and the program that checks them;
* :mod:`~securefl.runtime.secure_sum_steps`, :mod:`~securefl.runtime.sum_backends` and
  :mod:`~securefl.runtime.summation` -- secure sums as exchanges, their backends, and
  :func:`secure_sum`, the in-process simulator that drives the deployed steps;
* :mod:`~securefl.runtime.costs` -- a round's time and bytes over a transport.

The room sits between :mod:`securefl.crypto` (the primitives it runs) and
:mod:`securefl.protocols` (the FSSL steps built on it); ``records`` and ``sum_names``
import nothing of the room (``tests/test_layering.py`` checks the rooms, the absence of
import circles and these two).  Nothing here imports torch.
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


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'securefl.runtime' has no attribute {name!r}")
    return getattr(importlib.import_module(f"securefl.runtime.{module}"), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
