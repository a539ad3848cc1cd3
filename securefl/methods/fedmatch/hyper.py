"""FedMatch's hyper-parameters (:mod:`securefl.methods.hyper`)."""

from __future__ import annotations

from dataclasses import dataclass

from securefl.methods.hyper import NON_NEGATIVE, SGDRoundHyper, hp, integer, number


@dataclass(frozen=True)
class FedMatchHyper(SGDRoundHyper, defaults={"local_epochs": 1, "batch_size": 10, "lr": 1e-3,
                                             "momentum": 0.0, "weight_decay": 0.0}):
    """fedmatch (FedMatch, Jeong et al. 2021, and its code's ``config.py``); ``confidence``
    is the pseudo-label threshold tau in [0, 1]; ``cutout`` a fraction of the image side."""

    confidence: float = hp(0.85, number(0.0, 1.0))
    num_helpers: int = hp(2, integer(0))
    helper_interval: int = hp(10, integer(1))
    lambda_s: float = hp(10.0, NON_NEGATIVE)
    lambda_iccs: float = hp(1e-2, NON_NEGATIVE)
    lambda_a: float = hp(1e-2, NON_NEGATIVE)
    lambda_l2: float = hp(10.0, NON_NEGATIVE)
    lambda_l1: float = hp(1e-4, NON_NEGATIVE)
    l1_threshold: float = hp(5e-6, NON_NEGATIVE)
    psi_factor: float = hp(0.2, NON_NEGATIVE)
    num_ops: int = hp(2, integer(0))
    cutout: float = hp(0.5, number(0.0, 1.0))
