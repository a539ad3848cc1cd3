"""securefl.methods: the FSSL methods and baselines, built by name.

    build_method(name, *, secure="plaintext", seed=0, crypto_seed=None, sum_backend="secagg",
                 device="cpu", **hyper) -> Method

A method is set up on a federation's training view (no validation or test set), runs one
round per ``run_round`` and returns a :class:`RoundResult` (cost, pseudo-labels; no
accuracy); ``predict(x) -> labels`` and ``score(x, y)`` let the runner evaluate it.

``name`` is one of :data:`METHOD_NAMES`; every hyper-parameter is an explicit keyword
of the method's class (defaults from the papers' appendices) and an unknown one raises
:class:`~securefl.errors.ConfigError` naming it.  Method modules are imported lazily so
that building one method does not import the others.

=====================  ==========================================  =====================
name                   class                                       paper
=====================  ==========================================  =====================
fedprop                securefl.methods.fedprop:FedProp            FedProp Alg. 2
fedprop-mt             securefl.methods.fedprop:FedPropMT          FedProp §5.1 (+MT)
protofssl              securefl.methods.protofssl:ProtoFSSL        ProtoFSSL Alg. 1
fedsemi-pi             securefl.methods.fedsemi:FedSemiPi          FedSemi (tau=0)
fedsemi-mt             securefl.methods.fedsemi:FedSemiMT          FedSemi (tau=1)
fedsemi-d              securefl.methods.fedsemi:FedSemiD           FedSemi (dynamic)
fedanchor              securefl.methods.fedanchor:FedAnchor        FedAnchor
fedavg-labeled         securefl.methods.baselines:FedAvgLabeled    lower bound
fedavg-supervised      securefl.methods.baselines:FedAvgSupervised upper bound
fedavg-locallp         securefl.methods.baselines:FedAvgLocalLP    FedAvg+PL(localLP)
fedavg-pl              securefl.methods.baselines:FedAvgPL         FedAvg+PL(network)
fedavg-mt              securefl.methods.baselines:FedAvgMT         FedAvg+MT
fedavg-fixmatch        securefl.methods.baselines:FedAvgFixMatch   FedAvg+FixMatch
=====================  ==========================================  =====================

fedavg-locallp, -pl and -mt are FedProp's Table 1 baselines (fedprop.md §5.1),
fedavg-fixmatch is FedSemi Table 1's FedFixMatch.

Server and client halves (:mod:`securefl.methods.halves`): a split method names its
:class:`MethodClient` in ``client_half``; :class:`LocalData` is what a node holds;
:func:`method_run_config` is the run config its client halves are built from.  Split
today: every method -- the FedAvg family, FedProp / FedProp+MT (CrossClientLP's parties at
the clients), FedSemi-Pi/-MT/-D, FedAnchor and ProtoFSSL, all deployable (client halves in
``fedavg_clients``, ``fedprop_clients``, ``fedsemi_clients``, ``fedanchor_client``,
``protofssl_client``); ``docs/transport-phase2.md`` is the conversion guide.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from securefl.errors import ConfigError, InputError
from securefl.methods.base import RUN_PARAMETERS, SECURE_MODES, Method, RoundResult, label_digest
from securefl.methods.halves import LocalData, MethodClient
from securefl.methods.halves import run_config as method_run_config


@dataclass(frozen=True)
class Registration:
    """One registered method: its class and its hyper-parameter dataclass, each a class or
    the ``"module:Class"`` path it is imported from when first needed (``hyper=None``: one
    derived from the constructor, :func:`securefl.methods.hyper.derived_hyper`)."""

    method: type | str
    hyper: type | str | None = None


_REGISTRY: dict[str, Registration] = {}


def register_method(name: str, method: type | str, *, hyper: type | str | None = None) -> None:
    """Make ``method`` (a :class:`Method` subclass or its ``"module:Class"`` path) known as
    ``name`` to :func:`build_method`, ``securefl run --method`` and the method program of
    every transport, with hyper-parameter dataclass ``hyper`` (a
    :class:`~securefl.methods.hyper.Hyper` subclass or its path).  A name is registered
    once (InputError otherwise); the process that runs a method's client half must have
    registered it too (in process it is the same one)."""
    if not isinstance(name, str) or not name or name == "all" or name in _REGISTRY:
        raise InputError("name", name, "must be a new method name (not 'all', not registered)")
    _REGISTRY[name] = Registration(method, hyper)


def unregister_method(name: str) -> None:
    """Forget the method registered as ``name`` (ConfigError if there is none)."""
    _registration(name)
    del _REGISTRY[name]


for _name, _path, _hyper in (
    ("fedprop", "fedprop:FedProp", "FedPropHyper"),
    ("fedprop-mt", "fedprop:FedPropMT", "FedPropMTHyper"),
    ("protofssl", "protofssl:ProtoFSSL", "ProtoFSSLHyper"),
    ("fedsemi-pi", "fedsemi:FedSemiPi", "FedSemiHyper"),
    ("fedsemi-mt", "fedsemi:FedSemiMT", "FedSemiHyper"),
    ("fedsemi-d", "fedsemi:FedSemiD", "FedSemiDHyper"),
    ("fedanchor", "fedanchor:FedAnchor", "FedAnchorHyper"),
    ("fedavg-labeled", "baselines:FedAvgLabeled", "FedAvgHyper"),
    ("fedavg-supervised", "baselines:FedAvgSupervised", "FedAvgHyper"),
    ("fedavg-locallp", "baselines:FedAvgLocalLP", "LocalLPHyper"),
    ("fedavg-pl", "baselines:FedAvgPL", "NetworkPLHyper"),
    ("fedavg-mt", "baselines:FedAvgMT", "FedAvgMTHyper"),
    ("fedavg-fixmatch", "baselines:FedAvgFixMatch", "FixMatchHyper"),
):
    register_method(_name, f"securefl.methods.{_path}", hyper=f"securefl.methods.hyper:{_hyper}")

BUILTIN_METHODS: tuple[str, ...] = tuple(_REGISTRY)
"""The methods securefl ships (the table above), in the order of ``--method all``."""


def method_names() -> tuple[str, ...]:
    """Every registered method's name: the built-in ones, then those registered later."""
    return tuple(_REGISTRY)


def __getattr__(attribute: str) -> Any:
    """``METHOD_NAMES``: :func:`method_names` at the moment it is read."""
    if attribute == "METHOD_NAMES":
        return method_names()
    raise AttributeError(f"module {__name__!r} has no attribute {attribute!r}")


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
    """The class registered under ``name`` (imports its module)."""
    return _load(_registration(name).method)


def hyper_class(name: str) -> type:
    """The hyper-parameter dataclass of method ``name`` (:mod:`securefl.methods.hyper`)."""
    from securefl.methods.hyper import derived_hyper

    registration = _registration(name)
    if registration.hyper is None:
        return derived_hyper(method_class(name))
    return _load(registration.hyper)


def hyper_parameters(name: str) -> dict[str, Any]:
    """The hyper-parameter keywords of method ``name`` with their defaults."""
    from dataclasses import fields

    return {spec.name: spec.default for spec in fields(hyper_class(name))}


def build_hyper(name: str, hyper: dict[str, Any]) -> Any:
    """Method ``name``'s hyper-parameter dataclass built from ``hyper`` (the rest default):
    every value checked, before any data is needed.  An unknown key or a bad value raises
    InputError naming ``hyper.<name>.<key>`` and the value."""
    from securefl.methods.hyper import hyper_error

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


__all__ = ["BUILTIN_METHODS", "METHOD_NAMES", "RUN_PARAMETERS", "SECURE_MODES", "LocalData",
           "Method", "MethodClient", "Registration", "RoundResult", "build_hyper", "build_method",
           "hyper_class", "hyper_parameters", "label_digest", "method_class", "method_names",
           "method_run_config", "register_method", "unregister_method"]
