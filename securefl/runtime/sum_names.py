"""The index of secure-sum backend names: which names a node's policy, an experiment's
``aggregation`` key or the CLI may give, and whether each is secure.

The registry (:mod:`securefl.runtime.sum_backends`) holds the backends themselves and
keeps this index in step: :func:`securefl.runtime.sum_backends.register` adds a backend's
name and kind here, ``unregister`` removes it.  The index imports nothing of its room, so
a node's policy (:mod:`securefl.runtime.policy`), which the transport reads, checks names
without importing the backends (which run on the transport).  The built-in backends'
names are declared here (:data:`BUILT_IN`), so a policy made before the registry is
imported already knows them; the registry refuses a backend that claims a declared name
with the other kind, and the tests check that every declared name is registered.

Who learns what: nothing; these are public names.
"""

from __future__ import annotations

from securefl.errors import InputError

BUILT_IN: dict[str, bool] = {"secagg": True, "he": True, "plaintext": False}
"""The built-in backends' names, in registration order, and whether each is secure."""

_INDEX: dict[str, bool] = dict(BUILT_IN)


def names(*, secure: bool | None = None) -> tuple[str, ...]:
    """Backend names in registration order (``secure``: only that kind)."""
    return tuple(n for n, s in _INDEX.items() if secure is None or s == secure)


def add(name: str, *, secure: bool) -> None:
    """Index ``name`` as a backend of kind ``secure``; a name indexed with the other kind:
    InputError."""
    if not isinstance(name, str) or not name:
        raise InputError("name", name, "must be a non-empty string")
    if _INDEX.get(name, secure) != secure:
        raise InputError("backend", name, f"is indexed with secure={_INDEX[name]}")
    _INDEX[name] = bool(secure)


def remove(name: str) -> None:
    """Drop ``name`` from the index (a backend unregistered)."""
    _INDEX.pop(name, None)
