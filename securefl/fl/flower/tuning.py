"""Latency settings of Flower that have no option, set from the processes securefl starts.

Measured on 127.0.0.1 (``docs/flower.md``), a stock message round costs seconds that are
mostly waiting, not work:

* the SuperNode polls the SuperLink every **3 s** when it has no message
  (``flwr.supernode.start_client_internal``: ``time.sleep(3)``), and polls its own state
  every 0.5 s for the ClientApp's reply and for a reply's object contents
  (``time.sleep(0.5)``);
* SuperExec polls for tasks every 1 s (this one has a setting:
  ``FLWR_SUPEREXEC_TASK_POLL_INTERVAL``, 0.01-60 s);
* a fresh ``flwr-clientapp`` process per message imports flwr (about 2 s on the project
  machine) and the app;
* pulling a message's objects that are not stored yet backs off for **1 s**, doubling
  to 10 s (``PULL_INITIAL_BACKOFF`` / ``PULL_BACKOFF_CAP``, bound as function defaults);
* ``Grid.send_and_receive`` sleeps 3 s between pulls (securefl polls itself:
  :mod:`securefl.fl.flower.grid_transport`).

:func:`tune_supernode_polling` shortens the SuperNode loop's idle polls -- the sleeps of
exactly :data:`IDLE_POLLS` seconds, the loop's only sleeps in flwr :data:`FLWR_VERSION` --
to ``interval``; a sleep of any other length (a retry backoff a later version might add
to that module) passes through unchanged.  :func:`tune_object_pulls` lowers the
object-pull backoff.  Both patch module attributes in the calling process only, and only
on the exact flwr version they were written against (:data:`FLWR_VERSION`, the version
``pyproject.toml`` pins): on any other they raise :class:`~securefl.errors.ConfigError`
naming both versions rather than patch internals they were not checked against.  They
change no message, no security setting and no result.
"""

from __future__ import annotations

import time
import types
from importlib import metadata

from securefl.errors import ConfigError

FLWR_VERSION = "1.42.0"
"""The flwr release this module's patches were read against (``pyproject.toml`` pins it)."""
IDLE_POLLS = (3.0, 0.5)
"""The SuperNode loop's poll sleeps in :data:`FLWR_VERSION`: no message pulled (3 s), no
reply / object content in the node's state yet (0.5 s)."""
PULL_INITIAL_BACKOFF = 0.02
PULL_BACKOFF_CAP = 0.25


def check_flwr_version() -> str:
    """The installed flwr version if it is :data:`FLWR_VERSION`, else ConfigError."""
    try:
        found = metadata.version("flwr")
    except metadata.PackageNotFoundError:
        raise ConfigError(f"flwr is not installed; securefl's Flower tuning needs flwr=={FLWR_VERSION} "
                          "(pip install -e '.[flower]')") from None
    if found != FLWR_VERSION:
        raise ConfigError(f"flwr {found} is installed; securefl's Flower latency tuning patches "
                          f"flwr {FLWR_VERSION} internals only (pip install flwr=={FLWR_VERSION})")
    return found


class _IdlePollTime(types.ModuleType):
    """The ``time`` module whose ``sleep`` shortens the idle polls to ``interval`` seconds."""

    def __init__(self, interval: float) -> None:
        super().__init__("time")
        self.interval = interval

    def __getattr__(self, name: str):
        return getattr(time, name)

    def sleep(self, seconds: float) -> None:
        time.sleep(min(seconds, self.interval) if seconds in IDLE_POLLS else seconds)


def tune_supernode_polling(interval: float) -> None:
    """Shorten the SuperNode loop's idle polls (:data:`IDLE_POLLS`) to ``interval`` seconds."""
    if not 0.01 <= interval <= 3.0:
        raise ConfigError(f"poll interval {interval!r} must lie in [0.01, 3] seconds")
    check_flwr_version()
    import flwr.supernode.start_client_internal as loop

    loop.time = _IdlePollTime(interval)


def tune_object_pulls(initial: float = PULL_INITIAL_BACKOFF, cap: float = PULL_BACKOFF_CAP) -> None:
    """Lower the backoff of object pulls that find an object not stored yet."""
    check_flwr_version()
    import flwr.supercore.inflatable.inflatable_utils as pulls

    for function in (pulls.pull_objects, pulls.pull_and_inflate_object_from_tree):
        function.__kwdefaults__["initial_backoff"] = initial
        function.__kwdefaults__["backoff_cap"] = cap
