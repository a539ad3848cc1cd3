"""Latency settings of Flower 1.41 that have no option, set from the processes securefl starts.

Measured on 127.0.0.1 (``docs/flower.md``), a stock message round costs seconds that are
mostly waiting, not work:

* the SuperNode polls the SuperLink every **3 s** when it has no message
  (``flwr.supernode.start_client_internal``: ``time.sleep(3)``), and polls its own state
  for the ClientApp's reply every 0.5 s;
* SuperExec polls for tasks every 1 s (this one has a setting:
  ``FLWR_SUPEREXEC_TASK_POLL_INTERVAL``, 0.01-60 s);
* a fresh ``flwr-clientapp`` process per message imports flwr (about 2 s on the project
  machine) and the app;
* pulling a message's objects that are not stored yet backs off for **1 s**, doubling
  to 10 s (``PULL_INITIAL_BACKOFF`` / ``PULL_BACKOFF_CAP``, bound as function defaults);
* ``Grid.send_and_receive`` sleeps 3 s between pulls (securefl polls itself:
  :mod:`securefl.fl.flower.grid_transport`).

:func:`tune_supernode_polling` caps the SuperNode's sleeps at ``interval``;
:func:`tune_object_pulls` lowers the object-pull backoff.  Both patch module attributes
of the pinned flwr version in the calling process only, check that the patched names
exist (a different flwr version raises :class:`~securefl.errors.ConfigError` rather than
silently doing nothing), and change no message, no security setting and no result.
"""

from __future__ import annotations

import time
import types

from securefl.errors import ConfigError

PULL_INITIAL_BACKOFF = 0.02
PULL_BACKOFF_CAP = 0.25


class _CappedTime(types.ModuleType):
    """The ``time`` module with ``sleep`` capped at ``interval`` seconds."""

    def __init__(self, interval: float) -> None:
        super().__init__("time")
        self.interval = interval

    def __getattr__(self, name: str):
        return getattr(time, name)

    def sleep(self, seconds: float) -> None:
        time.sleep(min(seconds, self.interval))


def tune_supernode_polling(interval: float) -> None:
    """Cap the SuperNode loop's sleeps (3 s idle, 0.5 s reply wait) at ``interval``."""
    import flwr.supernode.start_client_internal as loop

    if not 0.01 <= interval <= 3.0:
        raise ConfigError(f"poll interval {interval!r} must lie in [0.01, 3] seconds")
    if not hasattr(loop, "time") or not hasattr(loop, "start_client_internal"):
        raise ConfigError("this flwr version has no SuperNode loop to tune (securefl pins flwr 1.41)")
    loop.time = _CappedTime(interval)


def tune_object_pulls(initial: float = PULL_INITIAL_BACKOFF, cap: float = PULL_BACKOFF_CAP) -> None:
    """Lower the backoff of object pulls that find an object not stored yet."""
    import flwr.supercore.inflatable.inflatable_utils as pulls

    for function in (getattr(pulls, "pull_objects", None),
                     getattr(pulls, "pull_and_inflate_object_from_tree", None)):
        defaults = getattr(function, "__kwdefaults__", None) or {}
        if "initial_backoff" not in defaults or "backoff_cap" not in defaults:
            raise ConfigError("this flwr version has no object-pull backoff to tune "
                              "(securefl pins flwr 1.41)")
        defaults["initial_backoff"] = initial
        defaults["backoff_cap"] = cap
