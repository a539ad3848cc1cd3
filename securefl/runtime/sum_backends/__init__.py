"""Secure-sum backends: one interface, one registry; a backend is one module.

A backend sums the clients' fixed-point ring vectors (:mod:`securefl.crypto.fixed_point`)
without the server seeing one.  Its two sides:

* **client contributes** -- :meth:`SumBackend.contribute` puts a client's round-0
  message for sum ``name`` into the reply of the step that produced its vector, and
  :meth:`SumBackend.answer` answers the backend's later steps (:attr:`SumBackend.client_steps`);
* **server collects** -- :meth:`SumBackend.collect` runs the backend's remaining
  exchanges for every named sum at once over any :class:`~securefl.runtime.transport.Transport`
  (as :class:`~securefl.runtime.engine.Step`\\ s of :func:`securefl.runtime.engine.drive`) and
  returns each ring total with its survivors, dropouts and bytes.

Every member of a sum learns its public parameters as one :class:`SumSpec` (session,
cohort size and digest, threshold, length, ring); how it contributes is the backend's
business.  :func:`register` adds a backend, :func:`get` looks one up by name (an unknown
name is an :class:`~securefl.errors.InputError` naming the parameter), :func:`names` lists
them; :func:`securefl.runtime.secure_sum`, :func:`securefl.fl.aggregate`, the uploads
(:mod:`securefl.fl.uploads`, :mod:`securefl.fl.group_sums`), an experiment's
``aggregation`` key and ``securefl bench secagg`` all ask this registry.  A node's policy,
which the transport reads, asks the registry's index of names and kinds instead
(:mod:`securefl.runtime.sum_names`, kept in step by :func:`register` and
:func:`unregister`), so that the policy does not import the backends that run on the
transport.

**One code path.**  The in-process simulator of a deployable backend is
:meth:`SumBackend.simulate`: its own ``contribute`` / ``answer`` / ``collect`` driven on an
:class:`~securefl.runtime.transport.InProcessTransport` (each client a node whose data is its
encoded vector), so :func:`securefl.runtime.secure_sum` and ``securefl bench secagg`` time
the code a deployment runs.  A protocol round r of :data:`securefl.crypto.secagg.ROUNDS`
at which a client drops is the transport step :attr:`SumBackend.round_steps` names; it
never answers from that step on.  In the simulator every party is honest, so any client's
error aborts the sum with that very exception (a deployment reports it in ``failed`` and
goes on without the client).  A backend that runs no exchanges yet (``he``) overrides
``simulate`` and is refused on a deployment (:attr:`SumBackend.deployable`).
"""

from __future__ import annotations

from securefl.errors import InputError
from securefl.runtime import sum_names
from securefl.runtime.records import Record
from securefl.runtime.sum_backends import he, plaintext, secagg
from securefl.runtime.sum_backends.base import (
    CONTRIBUTE,
    SimulatedSum,
    SumBackend,
    SumOutcome,
    SumResult,
    SumSpec,
)

# ----------------------------------------------------------------------------- registry

_REGISTRY: dict[str, SumBackend] = {}


def register(backend: SumBackend) -> SumBackend:
    """Add ``backend`` under its ``name`` and index the name
    (:func:`securefl.runtime.sum_names.add`); a name taken already, or declared with the
    other kind: InputError."""
    if not isinstance(backend, SumBackend):
        raise InputError("backend", backend, "must be a SumBackend instance")
    if backend.name in _REGISTRY:
        raise InputError("backend", backend.name, "is registered already")
    sum_names.add(backend.name, secure=backend.secure)
    _REGISTRY[backend.name] = backend
    return backend


def unregister(name: str) -> None:
    """Remove the backend ``name`` and its name from the index (tests that register a
    backend of their own)."""
    _REGISTRY.pop(get(name).name)
    sum_names.remove(name)


def get(name: str, *, parameter: str = "backend", secure: bool | None = None) -> SumBackend:
    """The backend ``name``; unknown (or, with ``secure``, of the other kind): InputError
    naming ``parameter``."""
    backend = _REGISTRY.get(name) if isinstance(name, str) else None
    if backend is None or (secure is not None and backend.secure != secure):
        raise InputError(parameter, name, f"must be one of {names(secure=secure)}")
    return backend


def clear(state: Record) -> None:
    """Forget every sum in progress in a client's ``state``, of every backend (a new
    contributing step starts afresh)."""
    for backend in _REGISTRY.values():
        backend.clear(state)


def names(*, secure: bool | None = None) -> tuple[str, ...]:
    """Registered backend names in registration order (``secure``: only that kind)."""
    return tuple(n for n in sum_names.names(secure=secure) if n in _REGISTRY)


for _backend in (secagg.SecAgg(), he.HE(), plaintext.Plaintext()):
    register(_backend)

__all__ = ["CONTRIBUTE", "SimulatedSum", "SumBackend", "SumOutcome", "SumResult", "SumSpec",
           "clear", "get", "names",
           "register", "unregister"]
