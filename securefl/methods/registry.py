"""The method registry: a method is one registration, a name bound to its server-half class,
which names its hyper-parameter dataclass (``hyper``; a built-in method's package holds
both: ``securefl/methods/<name>/server.py`` and ``hyper.py``; the base is
:mod:`securefl.methods.hyper`).

Classes may be given as ``"module:Class"`` paths, imported when first needed, so that
building one method does not import the others; a registration may also give the path of
the class's dataclass, so that checking hyper-parameters imports no server module (the
built-in ones do; the class must name the same dataclass, ConfigError when it is loaded).
:func:`build_method` checks the hyper-parameters (:func:`build_hyper`) before it builds
the method; ``securefl run``,
the method program of every transport (:func:`securefl.methods.halves.configured_method`)
and the tests derive their method lists from :func:`method_names`.  Re-exported by
:mod:`securefl.methods`; ``docs/write-a-method.md`` shows a registration.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from securefl.errors import ConfigError, InputError
from securefl.methods.hyper import hyper_error

if TYPE_CHECKING:
    from securefl.methods.base import Method


@dataclass(frozen=True)
class Registration:
    """One registered method: its class and its hyper-parameter dataclass, each a class or
    the ``"module:Class"`` path it is imported from when first needed (``hyper=None``: the
    class's ``hyper``, read from the class)."""

    method: type | str
    hyper: type | str | None = None


_REGISTRY: dict[str, Registration] = {}


def register_method(name: str, method: type | str, *, hyper: type | str | None = None) -> None:
    """Make ``method`` (a :class:`Method` subclass or its ``"module:Class"`` path) known as
    ``name`` to :func:`build_method`, ``securefl run --method`` and the method program of
    every transport; ``hyper`` (a :class:`~securefl.methods.hyper.Hyper` subclass or its
    path) is the dataclass the class names, given where checking hyper-parameters should
    not import the class (module docstring).  A name is registered
    once (InputError otherwise); the process that runs a method's client half must have
    registered it too (in process it is the same one)."""
    if not isinstance(name, str) or not name or name == "all" or name in _REGISTRY:
        raise InputError("name", name, "must be a new method name (not 'all', not registered)")
    _REGISTRY[name] = Registration(method, hyper)


def unregister_method(name: str) -> None:
    """Forget the method registered as ``name`` (ConfigError if there is none)."""
    _registration(name)
    del _REGISTRY[name]


for _name, _package, _method, _hyper in (
    ("fedprop", "fedprop", "FedProp", "FedPropHyper"),
    ("fedprop-mt", "fedprop", "FedPropMT", "FedPropMTHyper"),
    ("protofssl", "protofssl", "ProtoFSSL", "ProtoFSSLHyper"),
    ("fedsemi-pi", "fedsemi", "FedSemiPi", "FedSemiHyper"),
    ("fedsemi-mt", "fedsemi", "FedSemiMT", "FedSemiHyper"),
    ("fedsemi-d", "fedsemi", "FedSemiD", "FedSemiDHyper"),
    ("fedanchor", "fedanchor", "FedAnchor", "FedAnchorHyper"),
    ("fedavg-labeled", "fedavg", "FedAvgLabeled", "FedAvgHyper"),
    ("fedavg-supervised", "fedavg", "FedAvgSupervised", "FedAvgHyper"),
    ("fedavg-locallp", "fedavg", "FedAvgLocalLP", "LocalLPHyper"),
    ("fedavg-pl", "fedavg", "FedAvgPL", "NetworkPLHyper"),
    ("fedavg-mt", "fedavg", "FedAvgMT", "FedAvgMTHyper"),
    ("fedavg-fixmatch", "fedavg", "FedAvgFixMatch", "FixMatchHyper"),
    ("fedmatch", "fedmatch", "FedMatch", "FedMatchHyper"),
):
    register_method(_name, f"securefl.methods.{_package}.server:{_method}",
                    hyper=f"securefl.methods.{_package}.hyper:{_hyper}")

BUILTIN_METHODS: tuple[str, ...] = tuple(_REGISTRY)
"""The methods securefl ships (the table above), in the order of ``--method all``."""


def method_names() -> tuple[str, ...]:
    """Every registered method's name: the built-in ones, then those registered later."""
    return tuple(_REGISTRY)


def _registration(name: str) -> Registration:
    if name not in _REGISTRY:
        raise ConfigError(f"method={name!r}: unknown method; choose from {', '.join(_REGISTRY)}")
    return _REGISTRY[name]


def _load(target: type | str) -> type:
    if isinstance(target, type):
        return target
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


def method_class(name: str) -> type[Method]:
    """The class registered under ``name`` (imports its module); ConfigError where the
    registration gives another dataclass than the class's ``hyper``."""
    registration = _registration(name)
    method = _load(registration.method)
    if registration.hyper is not None and _load(registration.hyper) is not method.hyper:
        raise ConfigError(f"method={name!r}: registered with hyper-parameters "
                          f"{_load(registration.hyper).__name__}, but {method.__name__}.hyper "
                          f"is {method.hyper.__name__}")
    return method


def hyper_class(name: str) -> type:
    """The hyper-parameter dataclass of method ``name`` (:mod:`securefl.methods.hyper`)."""
    registration = _registration(name)
    if registration.hyper is None:
        return method_class(name).hyper
    return _load(registration.hyper)


def hyper_parameters(name: str) -> dict[str, Any]:
    """The hyper-parameter keywords of method ``name`` with their defaults."""
    return {spec.name: spec.default for spec in fields(hyper_class(name))}


def build_hyper(name: str, hyper: dict[str, Any]) -> Any:
    """Method ``name``'s hyper-parameter dataclass built from ``hyper`` (the rest default):
    every value checked, before any data is needed.  An unknown key or a bad value raises
    InputError naming ``hyper.<name>.<key>`` and the value."""
    cls = hyper_class(name)
    known = hyper_parameters(name)
    unknown = sorted(set(hyper) - set(known))
    if unknown:
        raise InputError(f"hyper.{name}.{unknown[0]}", hyper[unknown[0]],
                         f"unknown hyper-parameter of {name}; known: {', '.join(sorted(known))}")
    try:
        return cls(**hyper)
    except InputError as exc:
        raise hyper_error(name, exc) from None


def build_method(name: str, *, secure: str = "plaintext", seed: int = 0,
                 crypto_seed: int | None = None, sum_backend: str = "secagg", device: str = "cpu",
                 **hyper: Any) -> Method:
    """Build method ``name`` with its hyper-parameters checked first (:func:`build_hyper`);
    an unknown name raises ConfigError.  ``crypto_seed``, ``sum_backend`` and ``device``:
    see :mod:`securefl.methods.base`."""
    checked = build_hyper(name, hyper)
    return method_class(name)(secure=secure, seed=seed, crypto_seed=crypto_seed,
                              sum_backend=sum_backend, device=device, **checked.keywords())
