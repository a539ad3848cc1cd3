"""ProtoFSSL's hyper-parameters (:mod:`securefl.methods.hyper`)."""

from __future__ import annotations

from dataclasses import dataclass

from securefl.errors import InputError
from securefl.methods.hyper import (
    NON_NEGATIVE,
    POSITIVE,
    PROBABILITY_BELOW_ONE,
    RoundHyper,
    choice,
    hp,
    integer,
    number,
    optional,
)
from securefl.methods.prototypical import DISTANCES

PROTOFSSL_AGGREGATIONS = ("fedavg", "fedprox")
"""ProtoFSSL's server aggregations: FedAvg, or FedProx with ``prox_mu``."""
PROTOFSSL_NORMS = ("none", "bn", "gn")
"""ProtoFSSL's ResNet normalisations (``norm``): none, batch norm, group norm."""


@dataclass(frozen=True)
class ProtoFSSLHyper(RoundHyper, defaults={"local_epochs": 10, "lr": 1e-3, "weight_decay": 1e-4,
                                          "max_shift": 0}):
    """protofssl (ProtoFSSL Algorithm 1, its appendix's defaults; RMSprop, no batches);
    ``noise_multiplier`` (the Gaussian release) needs ``clip`` and excludes ``noise_std``."""

    rmsprop_alpha: float = hp(0.9, PROBABILITY_BELOW_ONE)
    rmsprop_eps: float = hp(1e-7, POSITIVE)
    n_support: int = hp(1, integer(1))
    n_query: int = hp(2, integer(0))
    n_unlabeled: int = hp(100, integer(0))
    helpers: int = hp(5, integer(1))
    lambda_u: float = hp(0.3, NON_NEGATIVE)
    temperature: float = hp(0.5, POSITIVE)
    distance: str = hp("squared", choice(tuple(DISTANCES)))
    aggregation: str = hp("fedavg", choice(PROTOFSSL_AGGREGATIONS))
    prox_mu: float = hp(1e-2, NON_NEGATIVE)
    noise_std: float = hp(0.0, NON_NEGATIVE)
    noise_multiplier: float | None = hp(None, optional(POSITIVE))
    clip: float | None = hp(None, optional(POSITIVE))
    min_class_count: int = hp(1, integer(1))
    dp_delta: float = hp(1e-5, number(0.0, 1.0, low_open=True, high_open=True))
    norm: str = hp("none", choice(PROTOFSSL_NORMS))

    def check_together(self) -> None:
        if self.noise_multiplier is not None and (self.clip is None or self.noise_std > 0):
            raise InputError("noise_multiplier", self.noise_multiplier,
                             "needs clip and excludes noise_std")
