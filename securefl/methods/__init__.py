"""securefl.methods: the FSSL methods and baselines, built by name.

    build_method(name, *, secure="plaintext", seed=0, crypto_seed=None, sum_backend="secagg",
                 device="cpu", **hyper) -> Method

A method is set up on a federation's training view (no validation or test set), runs one
round per ``run_round`` and returns a :class:`RoundResult` (cost, pseudo-labels; no
accuracy); ``predict(x) -> labels`` and ``score(x, y)`` let the runner evaluate it.

``name`` is one of :func:`method_names` (the registry, :mod:`securefl.methods.registry`: a
method is one :func:`register_method`); its hyper-parameters are a dataclass
(in the method's package, ``securefl.methods.<name>.hyper``, on the base
:mod:`securefl.methods.hyper`; defaults from the papers' appendices), named by the class
(``hyper``), whose fields are the class's keyword-only constructor keywords; it is built
and checked before the method: an unknown or bad one raises
:class:`~securefl.errors.InputError` naming ``hyper.<name>.<key>``.  Method modules are imported lazily so that building one
method does not import the others.  The built-in methods (:data:`BUILTIN_METHODS`):

=====================  ==========================================  =====================
name                   class                                       paper
=====================  ==========================================  =====================
fedprop                securefl.methods.fedprop.server:FedProp            FedProp Alg. 2
fedprop-mt             securefl.methods.fedprop.server:FedPropMT          FedProp §5.1 (+MT)
protofssl              securefl.methods.protofssl.server:ProtoFSSL        ProtoFSSL Alg. 1
fedsemi-pi             securefl.methods.fedsemi.server:FedSemiPi          FedSemi (tau=0)
fedsemi-mt             securefl.methods.fedsemi.server:FedSemiMT          FedSemi (tau=1)
fedsemi-d              securefl.methods.fedsemi.server:FedSemiD           FedSemi (dynamic)
fedanchor              securefl.methods.fedanchor.server:FedAnchor        FedAnchor
fedavg-labeled         securefl.methods.fedavg.server:FedAvgLabeled    lower bound
fedavg-supervised      securefl.methods.fedavg.server:FedAvgSupervised upper bound
fedavg-locallp         securefl.methods.fedavg.server:FedAvgLocalLP    FedAvg+PL(localLP)
fedavg-pl              securefl.methods.fedavg.server:FedAvgPL         FedAvg+PL(network)
fedavg-mt              securefl.methods.fedavg.server:FedAvgMT         FedAvg+MT
fedavg-fixmatch        securefl.methods.fedavg.server:FedAvgFixMatch   FedAvg+FixMatch
fedmatch               securefl.methods.fedmatch.server:FedMatch          FedMatch (Jeong et al.)
=====================  ==========================================  =====================

fedavg-locallp, -pl and -mt are FedProp's Table 1 baselines (fedprop.md §5.1),
fedavg-fixmatch is FedSemi Table 1's FedFixMatch.

Server and client halves (:mod:`securefl.methods.halves`): every method is its server half
and names its :class:`MethodClient` in ``client_half``; :class:`LocalData` is what a node
holds; :func:`method_run_config` is the run config its client halves are built from.
Every method runs on any transport.  ``docs/write-a-method.md`` shows how to add one.
"""

from __future__ import annotations

from typing import Any

from securefl.methods.base import SECURE_MODES, Method, RoundResult
from securefl.methods.halves import LocalData, MethodClient, label_digest
from securefl.methods.halves import run_config as method_run_config
from securefl.methods.hyper import RUN_PARAMETERS, Hyper
from securefl.methods.registry import (
    BUILTIN_METHODS,
    Registration,
    build_hyper,
    build_method,
    hyper_class,
    hyper_parameters,
    method_class,
    method_names,
    register_method,
    unregister_method,
)


def __getattr__(attribute: str) -> Any:
    """``METHOD_NAMES``: :func:`method_names` at the moment it is read (the registry is
    open, so a constant would miss methods registered later)."""
    if attribute == "METHOD_NAMES":
        return method_names()
    raise AttributeError(f"module {__name__!r} has no attribute {attribute!r}")


__all__ = ["BUILTIN_METHODS", "METHOD_NAMES", "RUN_PARAMETERS", "SECURE_MODES", "Hyper",
           "LocalData", "Method", "MethodClient", "Registration", "RoundResult", "build_hyper",
           "build_method", "hyper_class", "hyper_parameters", "label_digest", "method_class",
           "method_names", "method_run_config", "register_method", "unregister_method"]
