"""securefl on Flower: the transport, the Flower app and local deployment.

Needs the ``flower`` extra (``pip install 'securefl[flower]'``, pinning flwr 1.42.0);
nothing outside this package imports flwr.

- :class:`FlowerTransport` (``grid_transport``): exchanges as Flower messages.
- ``app``: ``server_app`` / ``client_app``, the components of securefl's FAB, and
  ``PROGRAMS`` (the programs they serve: ``method`` -- any split method, one experiment
  job, :mod:`securefl.experiments.deployment` -- and ``link-check``).
- ``deploy``: :class:`LocalFederation` (SuperLink + N SuperNodes on 127.0.0.1),
  ``write_app``.
- ``node``: ``python -m securefl.fl.flower.node``, a SuperNode with securefl's latency
  settings (``tuning``).
- ``python -m securefl.fl.flower local ...``: run a program on a local federation.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "FlowerTransport": "grid_transport",
    "LocalFederation": "deploy",
    "write_app": "deploy",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'securefl.fl.flower' has no attribute {name!r}")
    return getattr(importlib.import_module(f"securefl.fl.flower.{module}"), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
