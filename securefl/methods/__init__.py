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
fedmatch               securefl.methods.fedmatch:FedMatch          FedMatch (labels at client)
=====================  ==========================================  =====================

fedavg-locallp, -pl and -mt are FedProp's Table 1 baselines (fedprop.md §5.1),
fedavg-fixmatch is FedSemi Table 1's FedFixMatch.

Server and client halves (:mod:`securefl.methods.halves`): a split method names its
:class:`MethodClient` in ``client_half``; :class:`LocalData` is what a node holds;
:func:`method_run_config` is the run config its client halves are built from.  Split
today: every method -- the FedAvg family, FedProp / FedProp+MT (CrossClientLP's parties at
the clients), FedSemi-Pi/-MT/-D, FedAnchor and ProtoFSSL, all deployable (client halves in
``fedavg_clients``, ``fedprop_clients``, ``fedsemi_clients``, ``fedanchor_client``,
``protofssl_client``); ``docs/method-halves.md`` is the guide to writing one.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from securefl.errors import ConfigError
from securefl.methods.base import SECURE_MODES, Method, RoundResult, label_digest
from securefl.methods.halves import LocalData, MethodClient
from securefl.methods.halves import run_config as method_run_config

_REGISTRY: dict[str, tuple[str, str]] = {
    "fedprop": ("securefl.methods.fedprop", "FedProp"),
    "fedprop-mt": ("securefl.methods.fedprop", "FedPropMT"),
    "protofssl": ("securefl.methods.protofssl", "ProtoFSSL"),
    "fedsemi-pi": ("securefl.methods.fedsemi", "FedSemiPi"),
    "fedsemi-mt": ("securefl.methods.fedsemi", "FedSemiMT"),
    "fedsemi-d": ("securefl.methods.fedsemi", "FedSemiD"),
    "fedanchor": ("securefl.methods.fedanchor", "FedAnchor"),
    "fedavg-labeled": ("securefl.methods.baselines", "FedAvgLabeled"),
    "fedavg-supervised": ("securefl.methods.baselines", "FedAvgSupervised"),
    "fedavg-locallp": ("securefl.methods.baselines", "FedAvgLocalLP"),
    "fedavg-pl": ("securefl.methods.baselines", "FedAvgPL"),
    "fedavg-mt": ("securefl.methods.baselines", "FedAvgMT"),
    "fedavg-fixmatch": ("securefl.methods.baselines", "FedAvgFixMatch"),
    "fedmatch": ("securefl.methods.fedmatch", "FedMatch"),
}

METHOD_NAMES: tuple[str, ...] = tuple(_REGISTRY)
RUN_PARAMETERS = ("secure", "seed", "crypto_seed", "sum_backend", "device")
"""Keywords every method takes that are set by the run, not hyper-parameters."""


def method_class(name: str) -> type[Method]:
    """The class registered under ``name`` (imports its module)."""
    if name not in _REGISTRY:
        raise ConfigError(f"method={name!r}: unknown method; choose from {', '.join(METHOD_NAMES)}")
    module, attribute = _REGISTRY[name]
    return getattr(importlib.import_module(module), attribute)


def hyper_parameters(name: str) -> dict[str, Any]:
    """The hyper-parameter keywords of method ``name`` with their defaults."""
    signature = inspect.signature(method_class(name).__init__)
    return {p.name: p.default for p in signature.parameters.values()
            if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in RUN_PARAMETERS}


def build_method(name: str, *, secure: str = "plaintext", seed: int = 0,
                 crypto_seed: int | None = None, sum_backend: str = "secagg", device: str = "cpu",
                 **hyper: Any) -> Method:
    """Build method ``name``; unknown names or hyper-parameters raise ConfigError.
    ``crypto_seed``, ``sum_backend`` and ``device``: see :mod:`securefl.methods.base`."""
    known = hyper_parameters(name)
    unknown = sorted(set(hyper) - set(known))
    if unknown:
        raise ConfigError(f"hyper[{name}].{unknown[0]}={hyper[unknown[0]]!r}: unknown "
                          f"hyper-parameter of {name}; known: {', '.join(sorted(known))}")
    return method_class(name)(secure=secure, seed=seed, crypto_seed=crypto_seed,
                              sum_backend=sum_backend, device=device, **hyper)


__all__ = ["METHOD_NAMES", "SECURE_MODES", "LocalData", "Method", "MethodClient", "RoundResult",
           "build_method", "hyper_parameters", "label_digest", "method_class", "method_run_config"]
